package seal

import (
	"cmp"
	"slices"
)

// KeyRef names what sealed a stored value: a provider and its key ("identity" and "" for a plain value).
type KeyRef struct {
	Provider string
	KeyID    string
}

// RefOf names what sealed stored.
func RefOf(stored []byte) KeyRef {
	provider, keyID := Describe(stored)
	return KeyRef{Provider: provider, KeyID: keyID}
}

// Census counts stored values by what sealed them (`cairn encryption status`, a storage's start).
type Census map[KeyRef]int

// Add counts one stored value.
func (c Census) Add(stored []byte) { c[RefOf(stored)]++ }

// Refs lists the counted refs, by provider then key.
func (c Census) Refs() []KeyRef {
	refs := make([]KeyRef, 0, len(c))
	for ref := range c {
		refs = append(refs, ref)
	}
	slices.SortFunc(refs, func(a, b KeyRef) int {
		return cmp.Or(cmp.Compare(a.Provider, b.Provider), cmp.Compare(a.KeyID, b.KeyID))
	})
	return refs
}

// Missing lists the refs of c that the keyring cannot open: keys removed from the configuration while values
// still use them. A KMS provider's key versions are the plugin's to know, so only its name is checked.
func (k *Keyring) Missing(c Census) []KeyRef {
	var missing []KeyRef
	for _, ref := range c.Refs() {
		if !k.Uses(ref.Provider, ref.KeyID) {
			missing = append(missing, ref)
		}
	}
	return missing
}

// IsPrimary reports whether ref is what seals new values of key now. For a KMS provider that is its key version
// when this keyring sealed its last data key (at NewKeyring at the latest); storages move to a new KMS version
// within PrimaryCheckInterval of the rotation, so run a rewrap after that.
func (k *Keyring) IsPrimary(key []byte, ref KeyRef) bool {
	provider, keyID := k.Primary(key)
	return provider == ref.Provider && (keyID == "" || keyID == ref.KeyID)
}
