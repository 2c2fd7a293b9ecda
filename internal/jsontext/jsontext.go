// Package jsontext owns how Weir writes a JSON string: one escaping for
// every writer of JSON text (the pipeline's values, the formats' decoded
// documents), as encoding/json writes it with HTML escaping off.
package jsontext

import (
	"unicode/utf8"
	"unsafe"
)

const hexDigits = "0123456789abcdef"

// Append appends s as a JSON string, escaped as encoding/json
// escapes strings with SetEscapeHTML(false): '"' and '\\', control
// characters (\b, \f, \n, \r, \t short, others \u00XX), U+2028 and U+2029,
// and every invalid UTF-8 byte replaced by U+FFFD.
func Append(dst, s []byte) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// AppendText is Append of a string, which it only reads (no copy).
func AppendText(dst []byte, s string) []byte {
	return Append(dst, unsafe.Slice(unsafe.StringData(s), len(s)))
}
