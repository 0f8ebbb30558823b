// Command cni-run performs one CNI operation on a network namespace, as a container runtime
// does, through the CNI project's own library (libcni): ADD prints the result as JSON, DEL
// releases what ADD set up (using the result libcni cached at ADD).
//
// The pod agent (testing/pod-agent) runs it inside a node's network namespace, with the Multus
// configuration, once per pod:
//
//	cni-run add -conf multus.conf -netns /run/netns/nsc-p-… -id <sandbox id> \
//	  -ifname eth0 -args 'K8S_POD_NAMESPACE=…;K8S_POD_NAME=…' -path <plugin dir> -cache <dir>
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
)

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "add" && os.Args[1] != "del") {
		fmt.Fprintln(os.Stderr, "usage: cni-run add|del -conf FILE -netns PATH -id ID [-ifname eth0] [-args K=V;...] -path DIRS -cache DIR")
		os.Exit(2)
	}
	command := os.Args[1]
	flags := flag.NewFlagSet("cni-run "+command, flag.ExitOnError)
	conf := flags.String("conf", "", "network configuration file (.conf or .conflist)")
	netns := flags.String("netns", "", "path of the network namespace")
	id := flags.String("id", "", "container (sandbox) ID")
	ifname := flags.String("ifname", "eth0", "interface name in the namespace")
	args := flags.String("args", "", "CNI_ARGS, as K=V;K=V")
	path := flags.String("path", "", "plugin directories, separated by ':'")
	cache := flags.String("cache", "", "libcni's cache directory (results for DEL)")
	timeout := flags.Duration("timeout", 60*time.Second, "give up after this long")
	_ = flags.Parse(os.Args[2:])
	for name, value := range map[string]string{"-conf": *conf, "-netns": *netns, "-id": *id, "-path": *path, "-cache": *cache} {
		if value == "" {
			fmt.Fprintf(os.Stderr, "cni-run: %s is required\n", name)
			os.Exit(2)
		}
	}

	list, err := libcni.NetworkConfFromFile(*conf)
	if err != nil {
		fail("reading %s: %v", *conf, err)
	}
	runtime := &libcni.RuntimeConf{ContainerID: *id, NetNS: *netns, IfName: *ifname}
	for _, pair := range strings.Split(*args, ";") {
		if key, value, ok := strings.Cut(pair, "="); ok {
			runtime.Args = append(runtime.Args, [2]string{key, value})
		}
	}
	cni := libcni.NewCNIConfigWithCacheDir(filepath.SplitList(*path), *cache, nil)
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	switch command {
	case "add":
		result, err := cni.AddNetworkList(ctx, list, runtime)
		if err != nil {
			fail("ADD %s on %s: %v", list.Name, *netns, err)
		}
		out, err := json.Marshal(result)
		if err != nil {
			fail("encoding the result: %v", err)
		}
		fmt.Println(string(out))
	case "del":
		if err := cni.DelNetworkList(ctx, list, runtime); err != nil {
			fail("DEL %s on %s: %v", list.Name, *netns, err)
		}
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "cni-run: "+format+"\n", args...)
	os.Exit(1)
}
