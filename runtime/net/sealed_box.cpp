#include "net/sealed_box.hpp"

#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>

#include <memory>
#include <vector>

#include "base/errors.hpp"

namespace rl::net {
namespace {

constexpr size_t kKey = 32, kNonce = 12, kTag = 16;
constexpr const char* kInfo = "rlhost sealed box v1";

using Pkey = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;
using Pctx = std::unique_ptr<EVP_PKEY_CTX, decltype(&EVP_PKEY_CTX_free)>;
using Cctx = std::unique_ptr<EVP_CIPHER_CTX, decltype(&EVP_CIPHER_CTX_free)>;

[[noreturn]] void crypto_error(const std::string& what) { throw Error("sealed box: " + what + " failed"); }

Pkey private_key(const std::string& raw) {
  Pkey k(EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, nullptr, reinterpret_cast<const unsigned char*>(raw.data()),
                                      raw.size()),
         EVP_PKEY_free);
  if (!k) crypto_error("loading a private key");
  return k;
}

Pkey public_key(const std::string& raw) {
  if (raw.size() != kKey) throw Error("sealed box: a public key is 32 bytes, got " + std::to_string(raw.size()));
  Pkey k(EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, nullptr, reinterpret_cast<const unsigned char*>(raw.data()),
                                     raw.size()),
         EVP_PKEY_free);
  if (!k) crypto_error("loading a public key");
  return k;
}

std::string raw_public(EVP_PKEY* k) {
  std::string out(kKey, '\0');
  size_t n = out.size();
  if (EVP_PKEY_get_raw_public_key(k, reinterpret_cast<unsigned char*>(out.data()), &n) != 1 || n != kKey)
    crypto_error("reading a public key");
  return out;
}

// AES key = HKDF-SHA256(X25519(mine, theirs), salt = sender's public || receiver's public).
std::string shared_key(EVP_PKEY* mine, EVP_PKEY* theirs, const std::string& salt) {
  Pctx d(EVP_PKEY_CTX_new(mine, nullptr), EVP_PKEY_CTX_free);
  std::string secret(kKey, '\0');
  size_t n = secret.size();
  if (!d || EVP_PKEY_derive_init(d.get()) != 1 || EVP_PKEY_derive_set_peer(d.get(), theirs) != 1 ||
      EVP_PKEY_derive(d.get(), reinterpret_cast<unsigned char*>(secret.data()), &n) != 1 || n != kKey)
    crypto_error("key agreement");
  Pctx h(EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nullptr), EVP_PKEY_CTX_free);
  std::string key(kKey, '\0');
  size_t kn = key.size();
  if (!h || EVP_PKEY_derive_init(h.get()) != 1 || EVP_PKEY_CTX_set_hkdf_md(h.get(), EVP_sha256()) != 1 ||
      EVP_PKEY_CTX_set1_hkdf_salt(h.get(), reinterpret_cast<const unsigned char*>(salt.data()),
                                  static_cast<int>(salt.size())) != 1 ||
      EVP_PKEY_CTX_set1_hkdf_key(h.get(), reinterpret_cast<const unsigned char*>(secret.data()),
                                 static_cast<int>(secret.size())) != 1 ||
      EVP_PKEY_CTX_add1_hkdf_info(h.get(), reinterpret_cast<const unsigned char*>(kInfo),
                                  static_cast<int>(std::char_traits<char>::length(kInfo))) != 1 ||
      EVP_PKEY_derive(h.get(), reinterpret_cast<unsigned char*>(key.data()), &kn) != 1)
    crypto_error("key derivation");
  OPENSSL_cleanse(secret.data(), secret.size());
  return key;
}

}  // namespace

BoxKeys box_keypair() {
  Pctx c(EVP_PKEY_CTX_new_id(EVP_PKEY_X25519, nullptr), EVP_PKEY_CTX_free);
  EVP_PKEY* raw = nullptr;
  if (!c || EVP_PKEY_keygen_init(c.get()) != 1 || EVP_PKEY_keygen(c.get(), &raw) != 1) crypto_error("key generation");
  Pkey k(raw, EVP_PKEY_free);
  BoxKeys out;
  out.public_key = raw_public(k.get());
  out.private_key.assign(kKey, '\0');
  size_t n = kKey;
  if (EVP_PKEY_get_raw_private_key(k.get(), reinterpret_cast<unsigned char*>(out.private_key.data()), &n) != 1)
    crypto_error("reading a private key");
  return out;
}

std::string box_seal(const std::string& their_public, const std::string& message) {
  Pkey theirs = public_key(their_public);
  BoxKeys eph = box_keypair();
  Pkey mine = private_key(eph.private_key);
  const std::string key = shared_key(mine.get(), theirs.get(), eph.public_key + their_public);
  std::string nonce(kNonce, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(nonce.data()), kNonce) != 1) crypto_error("random nonce");
  std::string out = eph.public_key + nonce;
  std::string ct(message.size(), '\0');
  Cctx c(EVP_CIPHER_CTX_new(), EVP_CIPHER_CTX_free);
  int len = 0, fin = 0;
  auto u = [](std::string& s) { return reinterpret_cast<unsigned char*>(s.data()); };
  if (!c || EVP_EncryptInit_ex(c.get(), EVP_aes_256_gcm(), nullptr, nullptr, nullptr) != 1 ||
      EVP_CIPHER_CTX_ctrl(c.get(), EVP_CTRL_GCM_SET_IVLEN, kNonce, nullptr) != 1 ||
      EVP_EncryptInit_ex(c.get(), nullptr, nullptr, reinterpret_cast<const unsigned char*>(key.data()),
                         reinterpret_cast<const unsigned char*>(nonce.data())) != 1 ||
      // the header is authenticated too: a box moved onto another ephemeral key does not open
      EVP_EncryptUpdate(c.get(), nullptr, &len, reinterpret_cast<const unsigned char*>(out.data()),
                        static_cast<int>(out.size())) != 1 ||
      EVP_EncryptUpdate(c.get(), u(ct), &len, reinterpret_cast<const unsigned char*>(message.data()),
                        static_cast<int>(message.size())) != 1 ||
      EVP_EncryptFinal_ex(c.get(), u(ct) + len, &fin) != 1)
    crypto_error("encryption");
  std::string tag(kTag, '\0');
  if (EVP_CIPHER_CTX_ctrl(c.get(), EVP_CTRL_GCM_GET_TAG, kTag, tag.data()) != 1) crypto_error("encryption tag");
  return out + ct + tag;
}

std::optional<std::string> box_open(const BoxKeys& keys, const std::string& box) {
  if (box.size() < kKey + kNonce + kTag || keys.private_key.size() != kKey) return std::nullopt;
  const std::string eph = box.substr(0, kKey), nonce = box.substr(kKey, kNonce);
  std::string tag = box.substr(box.size() - kTag);
  const std::string ct = box.substr(kKey + kNonce, box.size() - kKey - kNonce - kTag);
  try {
    Pkey theirs = public_key(eph);
    Pkey mine = private_key(keys.private_key);
    const std::string key = shared_key(mine.get(), theirs.get(), eph + keys.public_key);
    const std::string header = box.substr(0, kKey + kNonce);
    std::string pt(ct.size(), '\0');
    Cctx c(EVP_CIPHER_CTX_new(), EVP_CIPHER_CTX_free);
    int len = 0, fin = 0;
    if (!c || EVP_DecryptInit_ex(c.get(), EVP_aes_256_gcm(), nullptr, nullptr, nullptr) != 1 ||
        EVP_CIPHER_CTX_ctrl(c.get(), EVP_CTRL_GCM_SET_IVLEN, kNonce, nullptr) != 1 ||
        EVP_DecryptInit_ex(c.get(), nullptr, nullptr, reinterpret_cast<const unsigned char*>(key.data()),
                           reinterpret_cast<const unsigned char*>(nonce.data())) != 1 ||
        EVP_DecryptUpdate(c.get(), nullptr, &len, reinterpret_cast<const unsigned char*>(header.data()),
                          static_cast<int>(header.size())) != 1 ||
        EVP_DecryptUpdate(c.get(), reinterpret_cast<unsigned char*>(pt.data()), &len,
                          reinterpret_cast<const unsigned char*>(ct.data()), static_cast<int>(ct.size())) != 1 ||
        EVP_CIPHER_CTX_ctrl(c.get(), EVP_CTRL_GCM_SET_TAG, kTag, tag.data()) != 1 ||
        EVP_DecryptFinal_ex(c.get(), reinterpret_cast<unsigned char*>(pt.data()) + len, &fin) != 1)
      return std::nullopt;
    return pt;
  } catch (const Error&) {
    return std::nullopt;
  }
}

}  // namespace rl::net
