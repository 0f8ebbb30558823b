// rust_str.h: the bits of Rust's str that the default plugin's messages use, in C, so that
// the C plugin writes its reasons and errors byte for byte as the Rust one does:
// - rs_trim: str::trim, which strips Unicode White_Space (not only ASCII) at both ends;
// - rs_put_debug: `{:?}` of a str: in double quotes, with \0 \t \r \n \\ \" and \u{hex} for
//   every character Rust does not print as is (the table in rust_escapes.h).
// Plus a growable byte buffer to write messages into. Header-only (static functions): the
// plugin is one translation unit. No stdio: only malloc, realloc, memcpy, memcmp, abort.
//
// Strings from the host are valid UTF-8 (the component model guarantees it); the decoder
// never reads past a string's end even if one were not.
#ifndef RUST_STR_H
#define RUST_STR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rust_escapes.h"

// A byte buffer that grows; free(buf.ptr) when done. Out of memory aborts (a trap).
typedef struct {
  uint8_t *ptr;
  size_t len, cap;
} rs_buf;

static void rs_put(rs_buf *b, const void *s, size_t n) {
  if (n > b->cap - b->len) {
    size_t cap = b->cap ? b->cap : 64;
    while (cap - b->len < n) cap *= 2;
    uint8_t *p = realloc(b->ptr, cap);
    if (!p) abort();
    b->ptr = p;
    b->cap = cap;
  }
  if (n) memcpy(b->ptr + b->len, s, n);
  b->len += n;
}

static void rs_puts(rs_buf *b, const char *s) { rs_put(b, s, strlen(s)); }

static void rs_putc(rs_buf *b, char c) { rs_put(b, &c, 1); }

// `{}` of an unsigned number.
static void rs_put_usize(rs_buf *b, size_t n) {
  char digits[20];
  size_t i = sizeof digits;
  do {
    digits[--i] = (char)('0' + n % 10);
    n /= 10;
  } while (n);
  rs_put(b, digits + i, sizeof digits - i);
}

// Decodes the character at s[i] into *c and returns the index after it.
static size_t rs_decode(const uint8_t *s, size_t len, size_t i, uint32_t *c) {
  uint8_t lead = s[i++];
  size_t more = lead < 0x80 ? 0 : lead < 0xE0 ? 1 : lead < 0xF0 ? 2 : 3;
  uint32_t cp = more == 0 ? lead : more == 1 ? lead & 0x1F : more == 2 ? lead & 0x0F : lead & 0x07;
  for (; more && i < len; more--) cp = (cp << 6) | (s[i++] & 0x3F);
  *c = cp;
  return i;
}

// The index where the character that ends before s[end] starts.
static size_t rs_char_start_before(const uint8_t *s, size_t end) {
  size_t i = end - 1;
  while (i > 0 && (s[i] & 0xC0) == 0x80) i--;
  return i;
}

// char::is_whitespace: the Unicode property White_Space.
static bool rs_is_whitespace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// str::trim, in place.
static void rs_trim(const uint8_t **s, size_t *len) {
  const uint8_t *p = *s;
  size_t start = 0, end = *len;
  while (start < end) {
    uint32_t c;
    size_t next = rs_decode(p, end, start, &c);
    if (!rs_is_whitespace(c)) break;
    start = next;
  }
  while (end > start) {
    size_t at = rs_char_start_before(p, end);
    uint32_t c;
    rs_decode(p, end, at, &c);
    if (!rs_is_whitespace(c)) break;
    end = at;
  }
  *s = p + start;
  *len = end - start;
}

// Whether `{:?}` writes the character c (from U+0080) as \u{...}.
static bool rs_escapes(uint32_t c) {
  uint32_t at = 0x80;
  bool escaped = true;
  size_t i = 0;
  while (i < sizeof RUST_ESCAPE_RUNS) {
    uint32_t run = 0;
    unsigned shift = 0;
    uint8_t byte;
    do {
      byte = RUST_ESCAPE_RUNS[i++];
      run |= (uint32_t)(byte & 0x7F) << shift;
      shift += 7;
    } while ((byte & 0x80) && i < sizeof RUST_ESCAPE_RUNS);
    if (c - at < run) return escaped;
    at += run;
    escaped = !escaped;
  }
  return true;  // past U+10FFFF: not a character
}

static void rs_put_unicode_escape(rs_buf *b, uint32_t c) {
  static const char hex[] = "0123456789abcdef";
  char digits[8];
  size_t i = sizeof digits;
  do {
    digits[--i] = hex[c & 0xF];
    c >>= 4;
  } while (c);
  rs_puts(b, "\\u{");
  rs_put(b, digits + i, sizeof digits - i);
  rs_putc(b, '}');
}

// `{:?}` of the str s.
static void rs_put_debug(rs_buf *b, const uint8_t *s, size_t len) {
  rs_putc(b, '"');
  size_t i = 0;
  while (i < len) {
    uint32_t c;
    size_t next = rs_decode(s, len, i, &c);
    switch (c) {
      case '\0': rs_puts(b, "\\0"); break;
      case '\t': rs_puts(b, "\\t"); break;
      case '\r': rs_puts(b, "\\r"); break;
      case '\n': rs_puts(b, "\\n"); break;
      case '\\': rs_puts(b, "\\\\"); break;
      case '"': rs_puts(b, "\\\""); break;
      default:
        if (c < 0x20 || c == 0x7F || (c >= 0x80 && rs_escapes(c))) {
          rs_put_unicode_escape(b, c);
        } else {
          rs_put(b, s + i, next - i);
        }
    }
    i = next;
  }
  rs_putc(b, '"');
}

#endif
