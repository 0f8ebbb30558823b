// cni-run, the pod agent's CNI runtime (libcni). The networking parts themselves (Multus, the
// CNI plugins, whereabouts, CoreDNS) are built from their own modules by build.sh.
module nad-service-controller/hack/dataplane

go 1.26.0

require github.com/containernetworking/cni v1.3.1

require (
	go.opentelemetry.io/otel v1.29.0 // indirect
	go.opentelemetry.io/otel/trace v1.29.0 // indirect
)
