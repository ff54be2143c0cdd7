package relayauth

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
)

func TestLoadOrCreateSecretFile(t *testing.T) {
	path := SecretFile(t.TempDir())
	if err := LoadOrCreateSecretFile(path); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := info.Mode().Perm(); perm != 0o600 {
		t.Errorf("secret file mode %v, want 0600", perm)
	}
	first, err := ReadSecretFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 64 {
		t.Errorf("secret %q: want 256 bits in hex", first)
	}
	if err := LoadOrCreateSecretFile(path); err != nil {
		t.Fatal(err)
	}
	if again, _ := ReadSecretFile(path); again != first {
		t.Errorf("a second run replaced the secret: %q, then %q", first, again)
	}
}

func TestResolveSecret(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	inFile, empty := write("secret", "from-file\n"), write("empty", " \n")
	for _, tt := range []struct {
		name, secret, file string
		want               string
		wantErr            bool
	}{
		{"neither", "", "", "", false},
		{"flag", "from-flag", "", "from-flag", false},
		{"file, trimmed", "", inFile, "from-file", false},
		{"both", "from-flag", inFile, "", true},
		{"missing file", "", filepath.Join(dir, "none"), "", true},
		{"empty file", "", empty, "", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ResolveSecret(tt.secret, tt.file)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("ResolveSecret(%q, %q) = %q, %v; want %q (error %v)", tt.secret, tt.file, got, err, tt.want, tt.wantErr)
			}
			// The same through a service's flags.
			var args []string
			if tt.secret != "" {
				args = append(args, "--relay-secret", tt.secret)
			}
			if tt.file != "" {
				args = append(args, "--relay-secret-file="+tt.file)
			}
			var cfg SecretConfig
			fs := flag.NewFlagSet("service", flag.ContinueOnError)
			cfg.RegisterFlags(fs, "what the service does with it")
			if err := fs.Parse(args); err != nil {
				t.Fatal(err)
			}
			if got, err := cfg.Resolve(); (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("flags %q: Resolve() = %q, %v; want %q (error %v)", args, got, err, tt.want, tt.wantErr)
			}
		})
	}
}
