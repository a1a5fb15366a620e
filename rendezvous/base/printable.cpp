#include "rendezvous/base/printable.h"

#include <fmt/format.h>

namespace dtrun {

namespace {

// Length of the valid UTF-8 sequence starting at text[i] (2-4), or 0.
std::size_t utf8_sequence_length(std::string_view text, std::size_t i) {
  auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  unsigned char lead = byte(i);
  std::size_t length = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  for (std::size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
  }
  unsigned char second = byte(i + 1);
  // Overlong forms, UTF-16 surrogates and code points past U+10FFFF.
  if (lead == 0xE0 && second < 0xA0) return 0;
  if (lead == 0xED && second > 0x9F) return 0;
  if (lead == 0xF0 && second < 0x90) return 0;
  if (lead == 0xF4 && second > 0x8F) return 0;
  return length;
}

// The code point of a valid 3-byte sequence.
unsigned int code_point3(std::string_view text, std::size_t i) {
  auto byte = [&](std::size_t k) { return static_cast<unsigned int>(
                                       static_cast<unsigned char>(text[i + k])); };
  return ((byte(0) & 0x0F) << 12) | ((byte(1) & 0x3F) << 6) | (byte(2) & 0x3F);
}

// Printable in name only: characters that reorder the text shown around
// them (bidirectional overrides, the "Trojan Source" trick), hide
// (zero-width) or break it into lines (U+2028, U+2029).
bool invisible(unsigned int cp) {
  return (cp >= 0x200B && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202E) ||
         (cp >= 0x2060 && cp <= 0x206F) || cp == 0xFEFF;
}

}  // namespace

std::string printable(std::string_view text, bool keep_newlines) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7F) {
      out.push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    if (c < 0x80) {
      switch (c) {
        case '\n':
          out += keep_newlines ? "\n" : "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        default:
          out += fmt::format("\\x{:02x}", c);
      }
      ++i;
      continue;
    }
    std::size_t length = utf8_sequence_length(text, i);
    if (length == 0) {
      out += fmt::format("\\x{:02x}", c);
      ++i;
      continue;
    }
    // U+0080..U+009F (C1 controls, CSI among them) are C2 80..C2 9F.
    auto second = static_cast<unsigned char>(text[i + 1]);
    if (c == 0xC2 && second <= 0x9F) {
      out += fmt::format("\\u{:04x}", second);
    } else if (length == 3 && invisible(code_point3(text, i))) {
      out += fmt::format("\\u{:04x}", code_point3(text, i));
    } else {
      out.append(text.substr(i, length));
    }
    i += length;
  }
  return out;
}

std::string printable_excerpt(std::string_view text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return printable(text);
  return fmt::format("{}... ({} bytes)", printable(text.substr(0, max_bytes)), text.size());
}

}  // namespace dtrun
