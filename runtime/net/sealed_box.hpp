// Sealed boxes: a secret sent to one process over an untrusted channel (the c10d
// store of a multi-host job, which any host of the cluster network can read). The
// receiver publishes a public key; a sender seals a message to it with a fresh key
// pair of its own (X25519), a key derived from the shared secret (HKDF-SHA256 over
// both public keys) and AES-256-GCM. Only the holder of the private key opens it, and
// a box that was changed does not open. What it does not give: proof of who sealed
// it (anyone may seal to a public key) or of whose public key was published — the
// channel's writers are trusted (docs/security.md, "Across hosts").
#pragma once

#include <optional>
#include <string>

namespace rl::net {

struct BoxKeys {
  std::string public_key;   // 32 bytes
  std::string private_key;  // 32 bytes
};

// A new X25519 key pair. Throws rl::Error when the crypto library fails.
BoxKeys box_keypair();
// `message` sealed to `public_key` (32 bytes): ephemeral public key (32) || nonce (12)
// || ciphertext || tag (16). Throws rl::Error on a bad key.
std::string box_seal(const std::string& public_key, const std::string& message);
// The message, or nullopt when the box is not one sealed to these keys (wrong key,
// truncated or altered).
std::optional<std::string> box_open(const BoxKeys& keys, const std::string& box);

}  // namespace rl::net
