// CoreDNS with only the plugins the one-node cluster's Corefile uses (e2e/cluster/dns-up.sh): the
// upstream main links every plugin (cloud SDKs included); this one links seven, in upstream's
// plugin.cfg order, which is the order they run in.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func init() {
	dnsserver.Directives = []string{"ready", "health", "errors", "log", "loadbalance", "cache", "kubernetes"}
}

func main() {
	coremain.Run()
}
