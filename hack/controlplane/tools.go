//go:build tools

// Package tools records the commands this module builds, so that `go mod tidy` keeps their
// dependencies in go.mod and go.sum. Build one with, e.g.:
//
//	go build -trimpath -ldflags='-s -w' -o kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
