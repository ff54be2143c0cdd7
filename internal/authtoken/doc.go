// Package authtoken issues and reads etcd's auth tokens, as etcd's --auth-token selects them:
//
//   - "simple": etcd's simple tokens, "<16 random letters>.<log index of the Authenticate entry>", valid for
//     --auth-token-ttl seconds after their last use, in memory. A process that did not issue a token may
//     Remember it once told whose it is (the frontend asks the storages, which record every applied
//     Authenticate entry's token, as etcd's members do).
//   - "jwt,pub-key=FILE,priv-key=FILE,sign-method=METHOD[,ttl=DURATION]": etcd's JWTs (claims username,
//     revision, exp), signed with github.com/golang-jwt/jwt: any frontend with the same keys accepts any
//     other's tokens. A frontend with only pub-key verifies but cannot issue.
//
// A Provider only maps tokens to (user, auth revision); whether that revision is still current is the auth
// store's rule (authstate.Check).
package authtoken
