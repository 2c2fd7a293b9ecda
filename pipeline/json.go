package pipeline

import (
	"strconv"
	"unicode/utf8"
)

// AppendCountJSON appends the value `count` emits, {"key":"<key>","count":<n>},
// to dst: the key as a JSON string (escaped as encoding/json does with HTML
// escaping off; invalid UTF-8 becomes U+FFFD), the count as a JSON number.
func AppendCountJSON(dst, key []byte, n int64) []byte {
	dst = append(dst, `{"key":`...)
	dst = AppendJSONString(dst, key)
	dst = append(dst, `,"count":`...)
	dst = strconv.AppendInt(dst, n, 10)
	return append(dst, '}')
}

const hexDigits = "0123456789abcdef"

// AppendJSONString appends s as a JSON string, escaped as encoding/json
// escapes strings with SetEscapeHTML(false): '"' and '\\', control
// characters (\b, \f, \n, \r, \t short, others \u00XX), U+2028 and U+2029,
// and every invalid UTF-8 byte replaced by U+FFFD.
func AppendJSONString(dst, s []byte) []byte {
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
