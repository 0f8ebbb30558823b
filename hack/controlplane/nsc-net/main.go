// Command nsc-net joins the local control plane, which listens on the machine's loopback only,
// and the local nodes, which live in network namespaces of their own, without an interface or a
// route in the machine's namespace (hack/nodes.sh runs it; see hack/README.md, "The nodes"):
//
//	nsc-net egress SOCKET NETNS CIDR...
//	    The API server's egress to the cluster (its --egress-selector-config-file names SOCKET):
//	    an HTTP CONNECT proxy on the Unix socket SOCKET. A CONNECT to an address of one of the
//	    CIDRs (the nodes' LAN, the pods' ranges) is dialled inside network namespace NETNS (the
//	    nodes' LAN), where kubelets and pods are; any other (a webhook on the machine's loopback)
//	    from the machine's own. This is how kube-apiserver reaches kubelets for exec, logs and
//	    port-forward, as through konnectivity on a cluster whose control plane has no route to
//	    its nodes.
//	nsc-net relay NETNS LISTEN TO [NETNS LISTEN TO]...
//	    Listens on address LISTEN inside network namespace NETNS and relays each connection to TO,
//	    dialled from the machine's own namespace: the API server for the nodes (on their own
//	    127.0.0.1, as their kubeconfigs name it) and for the pods (on the LAN's address, the
//	    `kubernetes` Service's endpoint).
//
// Runs until SIGTERM or SIGINT. A namespace is entered by one locked OS thread at a time, which
// ends with its goroutine: a socket belongs to the namespace it was created in, wherever it is
// used afterwards.
package main

import (
	"bufio"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const dialTimeout = 10 * time.Second

func main() {
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	log.SetPrefix("nsc-net: ")
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "egress":
		err = egress(os.Args[2:])
	case "relay":
		err = relays(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		log.Fatal(err)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: nsc-net egress SOCKET NETNS CIDR... | nsc-net relay NETNS LISTEN TO [NETNS LISTEN TO]...")
	os.Exit(2)
}

// inNetns runs f on an OS thread that entered network namespace name (/run/netns/<name>). The
// thread is never unlocked: it ends when f's goroutine does, and never runs anything else.
func inNetns[T any](name string, f func() (T, error)) (T, error) {
	type result struct {
		value T
		err   error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		var zero T
		file, err := os.Open("/run/netns/" + name)
		if err != nil {
			done <- result{zero, fmt.Errorf("network namespace %s: %w", name, err)}
			return
		}
		defer file.Close()
		if err := unix.Setns(int(file.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- result{zero, fmt.Errorf("entering network namespace %s: %w", name, err)}
			return
		}
		value, err := f()
		done <- result{value, err}
	}()
	r := <-done
	return r.value, r.err
}

func egress(args []string) error {
	if len(args) < 3 {
		usage()
	}
	socket, netns := args[0], args[1]
	var routed []netip.Prefix
	for _, cidr := range args[2:] {
		prefix, err := netip.ParsePrefix(cidr)
		if err != nil {
			return fmt.Errorf("egress: %q is not a CIDR: %w", cidr, err)
		}
		routed = append(routed, prefix)
	}
	_ = os.Remove(socket)
	listener, err := net.Listen("unix", socket)
	if err != nil {
		return fmt.Errorf("egress: listening on %s: %w", socket, err)
	}
	// Only the API server, which runs as the same user, connects.
	if err := os.Chmod(socket, 0o600); err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	dial := func(address string) (net.Conn, error) {
		target, err := netip.ParseAddrPort(address)
		if err != nil {
			return nil, fmt.Errorf("%q is not an address and port", address)
		}
		for _, prefix := range routed {
			if prefix.Contains(target.Addr().Unmap()) {
				return inNetns(netns, func() (net.Conn, error) {
					return net.DialTimeout("tcp", address, dialTimeout)
				})
			}
		}
		return net.DialTimeout("tcp", address, dialTimeout)
	}
	go serve(listener, func(conn net.Conn) { connect(conn, dial) })
	log.Printf("egress: HTTP CONNECT on %s; to %v inside %s", socket, routed, netns)
	return nil
}

// connect answers one HTTP CONNECT on conn, then splices it with the connection dialled.
func connect(conn net.Conn, dial func(string) (net.Conn, error)) {
	defer conn.Close()
	reader := bufio.NewReader(conn)
	request, err := http.ReadRequest(reader)
	if err != nil {
		return
	}
	if request.Method != http.MethodConnect {
		fmt.Fprintf(conn, "HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
		return
	}
	upstream, err := dial(request.Host)
	if err != nil {
		message := err.Error()
		fmt.Fprintf(conn, "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s", len(message), message)
		return
	}
	defer upstream.Close()
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	// What the client sent after its CONNECT, already read, goes first.
	if buffered := reader.Buffered(); buffered > 0 {
		head, _ := reader.Peek(buffered)
		if _, err := upstream.Write(head); err != nil {
			return
		}
	}
	splice(conn, upstream)
}

func relays(args []string) error {
	if len(args) == 0 || len(args)%3 != 0 {
		usage()
	}
	for i := 0; i < len(args); i += 3 {
		netns, address, to := args[i], args[i+1], args[i+2]
		listener, err := inNetns(netns, func() (net.Listener, error) {
			return net.Listen("tcp", address)
		})
		if err != nil {
			return fmt.Errorf("relay: listening on %s in %s: %w", address, netns, err)
		}
		go serve(listener, func(conn net.Conn) {
			defer conn.Close()
			upstream, err := net.DialTimeout("tcp", to, dialTimeout)
			if err != nil {
				return
			}
			defer upstream.Close()
			splice(conn, upstream)
		})
		log.Printf("relay: %s in %s to %s", address, netns, to)
	}
	return nil
}

// serve accepts until the listener fails for good, handling each connection on its own
// goroutine.
func serve(listener net.Listener, handle func(net.Conn)) {
	for {
		conn, err := listener.Accept()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			if strings.Contains(err.Error(), "use of closed") {
				return
			}
			log.Printf("accepting on %s: %v", listener.Addr(), err)
			time.Sleep(200 * time.Millisecond)
			continue
		}
		go handle(conn)
	}
}

// splice copies both ways until both directions end, closing each write side as its reader ends.
func splice(a, b net.Conn) {
	var wg sync.WaitGroup
	wg.Add(2)
	half := func(to, from net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(to, from)
		if closer, ok := to.(interface{ CloseWrite() error }); ok {
			_ = closer.CloseWrite()
		} else {
			_ = to.Close()
		}
	}
	go half(a, b)
	go half(b, a)
	wg.Wait()
}
