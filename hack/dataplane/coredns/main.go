// CoreDNS v1.14.7 with the plugins the data plane's Corefile uses (hack/nodes.sh) and no others,
// built the way CoreDNS documents for a custom set: its own coremain and the plugins' packages.
// The full build registers every plugin CoreDNS ships (the cloud DNS providers' SDKs, etcd,
// dnstap, QUIC...), and took 282 s of a cold demo's Go builds.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() {
	coremain.Run()
}
