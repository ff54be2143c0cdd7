// Command cairn-kms is Cairn's reference KMS plugin (see internal/seal/kmsplugin): a local key service with key
// versions kept in a JSON file. Cairn starts it as a go-plugin plugin from an EncryptionConfiguration:
//
//   - kms:
//     name: local-kms
//     command: /usr/local/bin/cairn-kms
//     args: ["--key-file", "/etc/cairn/kms-keys.json"]
//
// Operators run it by hand to manage the key file:
//
//	cairn-kms rotate --key-file F   add a key version and make it primary (creates F with v1 when missing)
//
// A rotation needs no restart: the running plugins re-read the file at their next call; values sealed under
// older versions still open for as long as those versions stay in the file.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/cairn-kv/cairn/internal/seal/kmsplugin"
)

func main() {
	args := os.Args[1:]
	rotate := len(args) > 0 && args[0] == "rotate"
	if rotate {
		args = args[1:]
	}
	fs := flag.NewFlagSet("cairn-kms", flag.ExitOnError)
	keyFile := fs.String("key-file", "cairn-kms-keys.json", "JSON file of the key versions.")
	_ = fs.Parse(args)
	if rotate {
		id, err := kmsplugin.RotateKeyFile(*keyFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "cairn-kms rotate:", err)
			os.Exit(1)
		}
		fmt.Printf("%s: primary key version is now %s\n", *keyFile, id)
		return
	}
	kms, err := kmsplugin.NewLocalKMS(*keyFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cairn-kms:", err, "(create it with: cairn-kms rotate --key-file", *keyFile+")")
		os.Exit(1)
	}
	kmsplugin.Serve(kms)
}
