// net/sealed_box: a secret sealed to a public key opens with its private key only, and
// a box altered anywhere (header, ciphertext, tag) or cut short does not open.
#include <catch2/catch.hpp>

#include <string>

#include "net/sealed_box.hpp"

TEST_CASE("sealed box: opens with the receiver's key only", "[sealed_box]") {
  const auto alice = rl::net::box_keypair(), eve = rl::net::box_keypair();
  REQUIRE(alice.public_key.size() == 32);
  REQUIRE(alice.private_key.size() == 32);
  CHECK(alice.public_key != eve.public_key);
  const std::string token = "the run's admin token 0123456789abcdef";
  const std::string box = rl::net::box_seal(alice.public_key, token);
  CHECK(box.size() == 32 + 12 + token.size() + 16);
  CHECK(box.find(token) == std::string::npos);
  CHECK(rl::net::box_open(alice, box) == token);
  CHECK(rl::net::box_seal(alice.public_key, token) != box);   // a fresh key and nonce each time
  CHECK_FALSE(rl::net::box_open(eve, box).has_value());
  for (size_t at : {size_t(0), size_t(33), size_t(50), box.size() - 1}) {   // header, nonce, ciphertext, tag
    std::string bad = box;
    bad[at] ^= 1;
    CHECK_FALSE(rl::net::box_open(alice, bad).has_value());
  }
  CHECK_FALSE(rl::net::box_open(alice, box.substr(0, 40)).has_value());
  CHECK(rl::net::box_open(alice, rl::net::box_seal(alice.public_key, "")) == std::string());
  CHECK_THROWS_WITH(rl::net::box_seal("short", token), Catch::Contains("32 bytes"));
}
