package main

import (
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/cairn-kv/cairn/internal/tools/localstack"
)

// parseCommandLine finds the subcommand args name and parses its flags the way running it would, without
// running it.
func parseCommandLine(t *testing.T, args []string) error {
	t.Helper()
	cmd, rest, err := newRootCommand().Find(args)
	if err != nil {
		return err
	}
	if cmd.Name() != args[0] {
		return &unknownCommandError{args[0]}
	}
	if err := cmd.ParseFlags(rest); err != nil {
		return err
	}
	return cmd.ValidateArgs(cmd.Flags().Args())
}

type unknownCommandError struct{ name string }

func (e *unknownCommandError) Error() string { return "unknown cairn subcommand " + e.name }

// composeFile is the part of deploy/compose/docker-compose.yml the test checks.
type composeFile struct {
	Services map[string]struct {
		Image       string         `yaml:"image"`
		Command     []string       `yaml:"command"`
		DependsOn   map[string]any `yaml:"depends_on"`
		Volumes     []string       `yaml:"volumes"`
		Ports       []string       `yaml:"ports"`
		Profiles    []string       `yaml:"profiles"`
		Healthcheck struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
	} `yaml:"services"`
	Volumes map[string]any `yaml:"volumes"`
}

// composeDefault is compose's ${VAR:-default}, which the test reads as its default.
var composeDefault = regexp.MustCompile(`\$\{[A-Z0-9_]+:-([^}]*)\}`)

// cairnImage is the image every Cairn service of the compose files runs.
const cairnImage = "${CAIRN_IMAGE:-cairn:dev}"

func TestComposeCommandLines(t *testing.T) {
	for _, file := range []string{"docker-compose.yml", "docker-compose.tls.yml"} {
		t.Run(file, func(t *testing.T) { checkComposeFile(t, file) })
	}
}

// checkComposeFile checks every service of deploy/compose/file: the cairn image, a command line the binary
// takes, dependencies, volumes and hosts that exist, health checks that run the binary itself (the image has no
// shell), ports published on 127.0.0.1 only.
func checkComposeFile(t *testing.T, file string) {
	raw, err := os.ReadFile("../../deploy/compose/" + file)
	if err != nil {
		t.Fatal(err)
	}
	var compose composeFile
	if err := yaml.Unmarshal(composeDefault.ReplaceAll(raw, []byte("$1")), &compose); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	var rawCompose composeFile
	if err := yaml.Unmarshal(raw, &rawCompose); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	kinds := map[string]int{}
	for name, svc := range compose.Services {
		t.Run(name, func(t *testing.T) {
			for _, port := range svc.Ports {
				if !strings.HasPrefix(port, "127.0.0.1:") {
					t.Errorf("port %q is published beyond 127.0.0.1", port)
				}
			}
			if image := rawCompose.Services[name].Image; image != cairnImage {
				if len(svc.Profiles) == 0 {
					t.Fatalf("image %q: every service of the default stack runs %s", image, cairnImage)
				}
				return // Jaeger, Prometheus, Grafana: pulled by users
			}
			if len(svc.Command) == 0 {
				t.Fatalf("command %v: every service runs the cairn image with a subcommand", svc.Command)
			}
			kinds[svc.Command[0]]++
			if err := parseCommandLine(t, svc.Command); err != nil {
				t.Fatalf("cairn %s: %v", strings.Join(svc.Command, " "), err)
			}
			if test := svc.Healthcheck.Test; len(test) > 0 {
				if len(test) < 3 || test[0] != "CMD" || test[1] != "/cairn" {
					t.Errorf("health check %v: want [CMD /cairn health ...], the image has no shell", test)
				} else if err := parseCommandLine(t, test[2:]); err != nil {
					t.Errorf("health check %v: %v", test, err)
				}
			}
			for dep := range svc.DependsOn {
				if _, ok := compose.Services[dep]; !ok {
					t.Errorf("depends on unknown service %q", dep)
				}
			}
			for _, volume := range svc.Volumes {
				if source := strings.Split(volume, ":")[0]; !strings.HasPrefix(source, ".") {
					if _, ok := compose.Volumes[source]; !ok {
						t.Errorf("volume %q is not declared", volume)
					}
				}
			}
			for _, host := range referencedHosts(svc.Command) {
				if _, ok := compose.Services[host]; !ok {
					t.Errorf("command names host %q, which is no service of the stack", host)
				}
			}
		})
	}
	// frontend-1..3, one per member, and the scalable "frontend"; one scalable "watchhub".
	for kind, want := range map[string]int{"nats": 1, "consensus": 3, "storage": 3, "leasekeeper": 2, "watchhub": 1, "frontend": 4} {
		if kinds[kind] != want {
			t.Errorf("%d %s services, want %d", kinds[kind], kind, want)
		}
	}
}

// TestDockerfilesShareTheRuntimeStage keeps the image users build (Dockerfile, from a Go image) and the one CI
// builds from a host-built binary (Dockerfile.prebuilt) the same.
func TestDockerfilesShareTheRuntimeStage(t *testing.T) {
	runtimeStage := func(file string) string {
		raw, err := os.ReadFile("../../deploy/compose/" + file)
		if err != nil {
			t.Fatal(err)
		}
		_, stage, ok := strings.Cut(string(raw), "\nFROM scratch AS runtime\n")
		if !ok {
			t.Fatalf("%s has no \"FROM scratch AS runtime\" stage", file)
		}
		return stage
	}
	if user, ci := runtimeStage("Dockerfile"), runtimeStage("Dockerfile.prebuilt"); user != ci {
		t.Errorf("runtime stages differ:\nDockerfile:\n%s\nDockerfile.prebuilt:\n%s", user, ci)
	}
}

// referencedHosts are the hosts of the URLs in a command line that other services must answer at.
func referencedHosts(command []string) []string {
	var hosts []string
	for _, arg := range command {
		name, value, ok := strings.Cut(arg, "=")
		if !ok || name == "--listen-peer-urls" || strings.HasSuffix(name, "-client-urls") || strings.HasPrefix(name, "--listen-") {
			continue
		}
		for _, part := range strings.Split(value, ",") {
			_, rawURL, found := strings.Cut(part, "=") // --initial-cluster's name=url
			if !found {
				rawURL = part
			}
			if u, err := url.Parse(rawURL); err == nil && u.Hostname() != "" && !slices.Contains(hosts, u.Hostname()) {
				hosts = append(hosts, u.Hostname())
			}
		}
	}
	return hosts
}

func TestLocalStackCommandLines(t *testing.T) {
	configs := map[string]localstack.Config{
		"default":                          {},
		"5 members, 2 frontends, pprof on": {Members: 5, Frontends: 2, EnablePprof: true, LogLevel: "debug"},
		"every link TLS":                   {TLS: true},
		"a memory limit per child":         {ChildMemoryLimitMiB: 32},
	}
	for name, cfg := range configs {
		t.Run(name, func(t *testing.T) {
			cfg.Binary, cfg.DataDir = "cairn", t.TempDir()
			stack, err := localstack.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			specs, err := stack.Plan()
			if err != nil {
				t.Fatal(err)
			}
			for _, spec := range specs {
				if err := parseCommandLine(t, spec.Argv[1:]); err != nil {
					t.Errorf("%s: cairn %s: %v", spec.Name, strings.Join(spec.Argv[1:], " "), err)
				}
			}
		})
	}
}

func TestParseCommandLineRejectsWhatCairnWould(t *testing.T) {
	tests := [][]string{
		{"consensus", "--no-such-flag=1"},
		{"consensus", "--heartbeat-interval", "soon"},
		{"storage", "--quota-backend-bytes=lots"},
		{"nats", "extra-argument"},
		{"no-such-service"},
	}
	for _, args := range tests {
		if err := parseCommandLine(t, args); err == nil {
			t.Errorf("cairn %s: accepted", strings.Join(args, " "))
		}
	}
}
