package localstack

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// service is one kind of child process in the stack: `cairn <name> <args>`. Every instance has a "metrics"
// port whose /health is its readiness check.
type service struct {
	// name is the subcommand and the child name: "<name>-<i>" for instance i (from 1), or just name when
	// single.
	name   string
	single bool
	// perMember: instance i belongs to member i and runs only while member i is in the stack.
	perMember func(p *plan) bool
	// pprof says the subcommand takes --enable-pprof.
	pprof bool
	// ownMemory: the child runs without Config.ChildMemoryLimitMiB. Its live heap grows with its load (a
	// watchhub's with its watchers, the trace child's with its spans), where the limit's floor would hold it
	// to GOGC 100's collections rather than --gc-percent's: the limit is for the services whose heaps stay small.
	ownMemory bool
	// memoryPercent is the share of Config.ChildMemoryLimitMiB the child gets, in percent; 0 gives it all.
	memoryPercent int
	// count is how many instances the stack runs.
	count func(p *plan) int
	// ports are the named ports each instance needs, "metrics" among them.
	ports []string
	// args is instance i's command line after `cairn <name>`.
	args func(p *plan, i int) []string
	// dependsOn names the children that must be ready before instance i first starts.
	dependsOn func(p *plan, i int) []string
}

// services are the kinds of service a stack runs, in start order. A new kind is one more entry.
func services() []service {
	return withTrace([]service{natsService(), consensusService(), storageService(), leasekeeperService(), watchhubService(),
		frontendService(), backupService()})
}

func natsService() service {
	return service{
		name: "nats", single: true, pprof: true, count: one, ports: []string{"client", "metrics"},
		args: func(p *plan, _ int) []string {
			return []string{"--addr", p.cfg.Host, "--port", p.portString("nats", "client")}
		},
	}
}

// consensusMemoryPercent is a consensus member's share of the child memory limit (14 MiB of cairn up's 20).
// A member keeps only the newest entries of its log in memory (the rest of the catch-up window is read back
// from the WAL) and allocates about a fifth of what a storage does per put, so in less room it still collects
// seldom, and each collection is short.
const consensusMemoryPercent = 70

// memoryLimitMiB is the child's --memory-limit-mib for a stack whose children get childMiB.
func (svc service) memoryLimitMiB(childMiB int) int {
	if svc.memoryPercent == 0 {
		return childMiB
	}
	return max(1, childMiB*svc.memoryPercent/100)
}

func consensusService() service {
	return service{
		name: "consensus", pprof: true, count: members, memoryPercent: consensusMemoryPercent, perMember: always, ports: []string{"peer", "api", "metrics"},
		args: func(p *plan, i int) []string {
			self := p.child("consensus", i)
			state := "new" // ignored once the member has a WAL
			if slices.Contains(p.layout.Joined, i) {
				state = "existing"
			}
			return []string{
				"--name", memberName(i),
				"--data-dir", p.memberDir(i, "consensus"),
				"--listen-peer-urls", p.peerURL(self),
				"--initial-advertise-peer-urls", p.peerURL(self),
				"--initial-cluster", p.initialCluster(),
				"--initial-cluster-state", state,
				"--initial-cluster-token", p.layout.Token,
				"--listen-consensus-url", p.url(self, "api"),
				"--advertise-storage-url", p.url(p.child("storage", i), "api"),
				"--advertise-client-urls", p.clientURL(wrap(i, p.frontends())),
			}
		},
	}
}

func storageService() service {
	return service{
		name: "storage", pprof: true, count: members, perMember: always, ports: []string{"api", "metrics"},
		args: func(p *plan, i int) []string {
			return []string{
				"--name", memberName(i),
				"--data-dir", p.memberDir(i, "storage"),
				"--listen-storage-url", p.url(p.child("storage", i), "api"),
				"--consensus-endpoint", p.url(p.child("consensus", i), "api"),
				"--nats-url", p.natsURL(),
			}
		},
		dependsOn: func(p *plan, i int) []string { return []string{p.child("consensus", i), "nats"} },
	}
}

// leasekeeperService runs the leasekeepers: the first to claim is active, the others stand by. Keeper i lists
// member i's storage first, so the keepers spread their storage calls.
func leasekeeperService() service {
	return service{
		name: "leasekeeper", pprof: true, count: (*plan).leasekeepers, ports: []string{"api", "metrics"},
		args: func(p *plan, i int) []string {
			return []string{
				"--name", p.child("leasekeeper", i),
				"--listen-url", p.url(p.child("leasekeeper", i), "api"),
				"--storage-endpoints", strings.Join(p.memberURLs("storage", "api", wrap(i, p.layout.Members)), ","),
				"--nats-url", p.natsURL(),
				// The standbys ask the keepers whether the holder is alive: an idle stack writes nothing.
				"--peer-urls", strings.Join(p.leasekeeperURLs(), ","),
			}
		},
		dependsOn: func(p *plan, _ int) []string { return append(p.memberChildren("storage", 1), "nats") },
	}
}

// watchhubService runs the watchhubs: each follows every storage (its own member first) and NATS, and serves
// the Watch streams the frontends relay to it.
func watchhubService() service {
	return service{
		name: "watchhub", pprof: true, ownMemory: true, count: (*plan).watchhubs, ports: []string{"api", "metrics"},
		args: func(p *plan, i int) []string {
			return []string{
				"--name", p.child("watchhub", i),
				"--listen-url", p.url(p.child("watchhub", i), "api"),
				"--storage-endpoints", strings.Join(p.memberURLs("storage", "api", wrap(i, p.layout.Members)), ","),
				"--nats-url", p.natsURL(),
			}
		},
		dependsOn: func(p *plan, _ int) []string { return append(p.memberChildren("storage", 1), "nats") },
	}
}

func frontendService() service {
	return service{
		name: "frontend", pprof: true, count: (*plan).frontends, perMember: (*plan).frontendPerMember, ports: []string{"client", "metrics"},
		args: func(p *plan, i int) []string {
			self := p.clientURL(i)
			// The member with the frontend's number is listed first: it is the frontend's nearest.
			first := wrap(i, p.layout.Members)
			args := p.clientTLSArgs()
			if p.cfg.AuthToken != "" {
				args = append(args, "--auth-token", p.cfg.AuthToken)
			}
			return append(args, []string{
				"--name", p.frontendName(i),
				"--listen-client-urls", self,
				"--advertise-client-urls", self,
				"--consensus-endpoints", strings.Join(p.memberURLs("consensus", "api", first), ","),
				"--storage-endpoints", strings.Join(p.memberURLs("storage", "api", first), ","),
				"--lease-endpoints", strings.Join(p.leasekeeperURLs(), ","),
				"--watch-endpoints", strings.Join(p.childURLs(p.watchhubChildren(), "api"), ","),
			}...)
		},
		dependsOn: func(p *plan, _ int) []string {
			return append(append(p.memberChildren("storage", 1), p.leasekeeperChildren()...), p.watchhubChildren()...)
		},
	}
}

func one(*plan) int           { return 1 }
func always(*plan) bool       { return true }
func members(p *plan) int     { return p.layout.Members }
func memberName(i int) string { return fmt.Sprintf("member-%d", i) }

// wrap maps i (from 1) onto 1..n.
func wrap(i, n int) int { return (i-1)%n + 1 }

// plan is a stack's configuration with its layout: everything a service needs to build its command line.
type plan struct {
	cfg    Config
	layout *layout
}

// frontendPerMember: without Config.Frontends, frontend i is member i's and goes with it.
func (p *plan) frontendPerMember() bool { return p.cfg.Frontends == 0 }

// runs reports whether instance i of svc is part of the stack (a removed member's are not).
func (p *plan) runs(svc service, i int) bool {
	return svc.perMember == nil || !svc.perMember(p) || p.layout.isActive(i)
}

// frontends is the number of frontends: Config.Frontends, or one per member number (see runs).
func (p *plan) frontends() int {
	if p.cfg.Frontends == 0 {
		return p.layout.Members
	}
	return p.cfg.Frontends
}

// leasekeepers is the number of leasekeepers: Config.Leasekeepers, or 2 (one active, one standby).
func (p *plan) leasekeepers() int {
	if p.cfg.Leasekeepers == 0 {
		return 2
	}
	return p.cfg.Leasekeepers
}

func (p *plan) leasekeeperChildren() []string {
	names := make([]string, p.leasekeepers())
	for k := range names {
		names[k] = p.child("leasekeeper", k+1)
	}
	return names
}

// leasekeeperURLs are the keepers' Lease API URLs: the frontends' --lease-endpoints.
func (p *plan) leasekeeperURLs() []string {
	var urls []string
	for _, child := range p.leasekeeperChildren() {
		urls = append(urls, p.url(child, "api"))
	}
	return urls
}

// watchhubs is the number of watchhubs: Config.Watchhubs, or 2.
func (p *plan) watchhubs() int {
	if p.cfg.Watchhubs == 0 {
		return 2
	}
	return p.cfg.Watchhubs
}

func (p *plan) watchhubChildren() []string {
	names := make([]string, p.watchhubs())
	for k := range names {
		names[k] = p.child("watchhub", k+1)
	}
	return names
}

// childURLs are the named port's URLs of the children.
func (p *plan) childURLs(children []string, port string) []string {
	urls := make([]string, len(children))
	for i, child := range children {
		urls[i] = p.url(child, port)
	}
	return urls
}

// frontendName is frontend i's --name: the name of member i, which makes it the frontend's home member,
// or frontend-i beyond the members.
func (p *plan) frontendName(i int) string {
	if i <= p.layout.Members {
		return memberName(i)
	}
	return fmt.Sprintf("frontend-%d", i)
}

// child is the name of instance i of the named service.
func (p *plan) child(service string, i int) string { return fmt.Sprintf("%s-%d", service, i) }

func (p *plan) port(child, port string) int { return p.layout.Ports[child][port] }

func (p *plan) portString(child, port string) string { return fmt.Sprint(p.port(child, port)) }

// url is http://host:port of a child's named port.
func (p *plan) url(child, port string) string {
	return fmt.Sprintf("http://%s:%d", p.cfg.Host, p.port(child, port))
}

// clientURL is frontend i's client URL: https when the stack serves client TLS.
func (p *plan) clientURL(i int) string {
	u := p.url(p.child("frontend", i), "client")
	if !p.cfg.ClientTLS.Empty() || p.tls() {
		u = "https" + strings.TrimPrefix(u, "http")
	}
	return u
}

// peerURL is a consensus member's peer URL: https in a TLS stack.
func (p *plan) peerURL(child string) string {
	u := p.url(child, "peer")
	if p.tls() {
		u = "https" + strings.TrimPrefix(u, "http")
	}
	return u
}

// clientTLSArgs are the frontends' TLS flags (none without a certificate).
func (p *plan) clientTLSArgs() []string {
	t := p.cfg.ClientTLS
	if t.Empty() {
		return nil
	}
	args := []string{"--cert-file", t.CertFile, "--key-file", t.KeyFile}
	if t.TrustedCAFile != "" {
		args = append(args, "--trusted-ca-file", t.TrustedCAFile)
	}
	if t.ClientCertAuth {
		args = append(args, "--client-cert-auth")
	}
	return args
}

func (p *plan) natsURL() string {
	return fmt.Sprintf("nats://%s:%d", p.cfg.Host, p.port("nats", "client"))
}

func (p *plan) memberDir(i int, service string) string {
	return filepath.Join(p.cfg.DataDir, memberName(i), service)
}

func (p *plan) initialCluster() string {
	var parts []string
	for _, i := range p.layout.active() {
		parts = append(parts, memberName(i)+"="+p.peerURL(p.child("consensus", i)))
	}
	return strings.Join(parts, ",")
}

// memberChildren names every member's instance of service, starting at member first (or the next member
// after it) and wrapping around.
func (p *plan) memberChildren(service string, first int) []string {
	active := p.layout.active()
	start := max(0, slices.IndexFunc(active, func(i int) bool { return i >= first }))
	names := make([]string, len(active))
	for k := range names {
		names[k] = p.child(service, active[(start+k)%len(active)])
	}
	return names
}

// memberURLs is the URL of the named port of every member's instance of service, from member first.
func (p *plan) memberURLs(service, port string, first int) []string {
	children := p.memberChildren(service, first)
	urls := make([]string, len(children))
	for k, child := range children {
		urls[k] = p.url(child, port)
	}
	return urls
}
