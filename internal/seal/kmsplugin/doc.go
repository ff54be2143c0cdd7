// Package kmsplugin runs KMS providers of internal/seal as hashicorp/go-plugin plugins over gRPC.
//
// The plugin interface, for whoever writes one (Vault Transit, a cloud KMS, an HSM): a plugin is an executable
// that calls Serve with its KeyService. Cairn starts it (the kms provider's `command` and `args` in the
// EncryptionConfiguration), checks the handshake (Handshake: protocol version 1 and a magic cookie, so running
// the binary by hand says it is a plugin), and speaks the KeyService gRPC service of api/kmspb to it over a local
// socket:
//
//	Status()                          → version "v1", healthz "ok", the primary key's ID
//	Encrypt(plaintext)                → ciphertext, key_id       (wraps a 32-byte data key, never a value)
//	Decrypt(ciphertext, key_id)       → plaintext
//
// Errors are gRPC codes: NotFound for a key the KMS does not have (seal.ErrUnknownKey), InvalidArgument for a
// ciphertext that does not authenticate (seal.ErrAuthFailed), Unavailable when the KMS cannot be reached
// (seal.ErrUnavailable, retried). A key ID is at most 64 bytes, without ':' or white space; it is written in
// every sealed value's header, so a key version must stay decryptable while values use it (`cairn encryption
// status` tells).
//
// Provider (OpenProvider) is the Cairn side: a seal.Provider whose calls go to the plugin, each bounded by the
// configured timeout. A plugin process that dies (a crash, kill -9) is started again on the next call; a call
// that finds it down and cannot start it fails with seal.ErrUnavailable, which storage answers as a retryable
// Unavailable, never a wrong value. Unwrapped data keys are cached by seal.Keyring, so a running cluster calls the
// plugin about once per data key, not per request, plus one Status every seal.PrimaryCheckInterval while it seals
// (asked by one seal, the others going on meanwhile). seal's BenchmarkKeyring compares Seal and Open under this
// plugin with aesgcm.
//
// cmd/cairn-kms is the reference plugin: a local key service with key versions, kept in a file.
package kmsplugin
