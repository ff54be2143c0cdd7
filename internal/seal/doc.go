// Package seal is Cairn's encryption at rest: envelope encryption of values with data keys, configured by a file
// shaped like Kubernetes' EncryptionConfiguration.
//
// A value is sealed with a data key (AES-256-GCM, a random 96-bit nonce per value); the data key is wrapped by a
// key-encryption key that a Provider holds: a local key of the file (aesgcm: AES-256-GCM, secretbox:
// XSalsa20-Poly1305) or a KMS plugin (package kmsplugin). A sealed value carries a small versioned header naming
// its provider and key and the wrapped data key:
//
//	"cairn:enc:v1:" provider ":" key ":" uvarint(len(wrapped)) wrapped nonce(12) ciphertext-and-tag
//
// The header and the etcd key the value belongs to are the ciphertext's authenticated data, so a value moved to
// another key, or a header edited, fails to open with ErrAuthFailed rather than returning garbage. Keys (the key
// names) stay in the clear, as with Kubernetes' encryption, so ranges and watches work unchanged.
//
// A Keyring is built from a Config: a key belongs to the resource with its longest matching prefix; the first
// provider of that resource seals, every provider of the file opens, and a value without the header is returned
// as it is only where the resource lists identity (migration from a plain store). A writer's data key is reused
// for at most DataKeyUses seals or DataKeyAge, or until its KMS reports another primary key (PrimaryReporter),
// then replaced; unwrapped data keys are kept in a bounded cache with
// an expiry, so a KMS round trip is paid once per data key, not per request.
//
// Errors are typed: ErrAuthFailed (tampered or wrong key), ErrUnknownKey (a provider or key the file does not
// have), ErrNotSealed (a plain value where identity is not allowed), ErrUnavailable (a KMS that does not answer:
// retryable) and ErrConfig (a file refused at start).
package seal
