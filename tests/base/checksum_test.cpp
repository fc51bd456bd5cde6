#include "k3/base/checksum.h"

#include <gtest/gtest.h>

#include <string>

namespace k3 {

// Known answers from FIPS 180-4 examples and the NIST test vectors.
TEST(Sha256, KnownAnswers) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Lengths around the 56- and 64-byte padding boundaries, hashed whole and in uneven pieces.
TEST(Sha256, IncrementalMatchesOneShot) {
  for (size_t len : {0u, 1u, 55u, 56u, 57u, 63u, 64u, 65u, 119u, 120u, 200u}) {
    std::string data(len, '\0');
    for (size_t i = 0; i < len; ++i) data[i] = static_cast<char>(i * 31 + 7);
    Sha256 h;
    for (size_t pos = 0, piece = 1; pos < len; pos += piece, piece = piece * 2 + 1)
      h.update(std::string_view(data).substr(pos, piece));
    EXPECT_EQ(h.hex_digest(), sha256_hex(data)) << "length " << len;
  }
}

TEST(Sha256, OneBitChangesTheDigest) {
  std::string data(100, 'x');
  std::string flipped = data;
  flipped[50] ^= 1;
  EXPECT_NE(sha256_hex(data), sha256_hex(flipped));
}

}  // namespace k3
