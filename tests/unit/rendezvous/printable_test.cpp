#include <catch2/catch.hpp>

#include "rendezvous/base/printable.h"

using dtrun::printable;

TEST_CASE("printable text passes through unchanged") {
  CHECK(printable("rank 3: ValueError: bad lr 0.1") == "rank 3: ValueError: bad lr 0.1");
  CHECK(printable("température ✓ 日本 🙂") == "température ✓ 日本 🙂");
  CHECK(printable("C:\\path") == "C:\\path");
}

TEST_CASE("control characters cannot start a forged line or move the cursor") {
  CHECK(printable("oops\ndtrun: job succeeded") == "oops\\ndtrun: job succeeded");
  CHECK(printable("\x1b[2K\rFAKE") == "\\x1b[2K\\rFAKE");
  CHECK(printable("a\tb\x7f") == "a\\tb\\x7f");
  CHECK(printable(std::string("nul\0byte", 8)) == "nul\\x00byte");
  // C1 CSI (U+009B) in UTF-8, and a raw 0x9b byte.
  CHECK(printable("\xc2\x9b" "31m") == "\\u009b31m");
  CHECK(printable("\x9b" "31m") == "\\x9b31m");
}

TEST_CASE("bytes that are not UTF-8 are escaped one by one") {
  CHECK(printable("\xff\xfe") == "\\xff\\xfe");
  CHECK(printable("\xc3") == "\\xc3");                  // truncated sequence
  CHECK(printable("\xc0\xaf") == "\\xc0\\xaf");         // overlong '/'
  CHECK(printable("\xed\xa0\x80") == "\\xed\\xa0\\x80");  // UTF-16 surrogate
}

TEST_CASE("multi-line text may keep its newlines but nothing else") {
  CHECK(printable("line 1\nline 2\x1b]0;t\x07", true) == "line 1\nline 2\\x1b]0;t\\x07");
}

TEST_CASE("characters that reorder, hide or break the text are escaped") {
  // U+202E RIGHT-TO-LEFT OVERRIDE ("Trojan Source"), U+200B ZERO WIDTH
  // SPACE, U+2028 LINE SEPARATOR, U+2066 LEFT-TO-RIGHT ISOLATE, U+FEFF.
  CHECK(printable("a\xe2\x80\xae" "b") == "a\\u202eb");
  CHECK(printable("a\xe2\x80\x8b" "b") == "a\\u200bb");
  CHECK(printable("a\xe2\x80\xa8" "b") == "a\\u2028b");
  CHECK(printable("a\xe2\x81\xa6" "b") == "a\\u2066b");
  CHECK(printable("\xef\xbb\xbf" "x") == "\\ufeffx");
  // Their neighbours stay: an en dash (U+2013) and the euro sign (U+20AC).
  CHECK(printable("\xe2\x80\x93 \xe2\x82\xac") == "\xe2\x80\x93 \xe2\x82\xac");
}
