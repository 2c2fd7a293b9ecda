package pipeline

import (
	"bytes"
	"encoding/binary"
	"strconv"
	"unicode/utf8"
)

// This file reads top-level fields of a JSON object from its text without
// parsing the rest: the fast path of the projections (projectJSON) and of
// `key_by: {field}` (rawField); paths.go reads paths of any depth.
// A record's value has been checked as JSON where it was read
// (JSONCodec.Decode) or written by Weir (RecCodec), so the scanner only
// finds the extent of each field; on anything it does not expect (a key
// with an escape, text it cannot follow) it gives up, and its callers take
// the fastjson path, which decides, errors included.

// scanObject calls fn with the key (the text between its quotes) and the
// value's text of each top-level field of the JSON object b, in document
// order. It returns false if b is not an object it can scan: not an object,
// a key with an escape, or text it cannot follow (fn may have been called
// for earlier fields).
func scanObject(b []byte, fn func(key, val []byte)) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return skipSpace(b, i+1) == len(b)
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return false
		}
		end := bytes.IndexByte(b[i+1:], '"')
		if end < 0 {
			return false
		}
		key := b[i+1 : i+1+end]
		if bytes.IndexByte(key, '\\') >= 0 {
			return false
		}
		i = skipSpace(b, i+2+end)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipSpace(b, i+1)
		n := skipValue(b[i:])
		if n <= 0 {
			return false
		}
		fn(key, b[i:i+n])
		i = skipSpace(b, i+n)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return skipSpace(b, i+1) == len(b)
		default:
			return false
		}
	}
}

// skipSpace returns the index of the first byte of b at or after i that is
// not JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipValue returns the length of the JSON value at the start of b, or 0
// if it cannot tell. Containers are skipped by counting brackets outside
// strings: their contents are not checked (the whole text was).
func skipValue(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	switch c := b[0]; {
	case c == '"':
		return skipString(b)
	case c == '{' || c == '[':
		depth := 0
		for i := 0; i < len(b); i++ {
			switch b[i] {
			case '"':
				n := skipString(b[i:])
				if n == 0 {
					return 0
				}
				i += n - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return 0
	case c == '-' || c >= '0' && c <= '9':
		i := 1
		for i < len(b) && isNumberByte(b[i]) {
			i++
		}
		return i
	case bytes.HasPrefix(b, []byte("true")):
		return 4
	case bytes.HasPrefix(b, []byte("false")):
		return 5
	case bytes.HasPrefix(b, []byte("null")):
		return 4
	}
	return 0
}

func isNumberByte(c byte) bool {
	return c >= '0' && c <= '9' || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'
}

// skipString returns the length of the JSON string at the start of b
// (quotes included), or 0 if it does not end.
func skipString(b []byte) int {
	for i := 1; i < len(b); i++ {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return 0
		}
		i += j
		// The quote ends the string unless an odd number of backslashes
		// escapes it (the opening quote is no backslash).
		k := i - 1
		for b[k] == '\\' {
			k--
		}
		if (i-1-k)%2 == 0 {
			return i + 1
		}
	}
	return 0
}

// scalarValue decodes the text of a JSON value as DecodeJSON does, if it
// is one that needs no parser: a string without escapes, an integer that
// an int64 holds, true, false or null. ok is false for anything else
// (which the caller decodes with fastjson).
func scalarValue(t []byte) (v any, ok bool) {
	switch t[0] {
	case '"':
		s := t[1 : len(t)-1]
		if bytes.IndexByte(s, '\\') >= 0 {
			return nil, false
		}
		return string(s), true
	case 't':
		return true, true
	case 'f':
		return false, true
	case 'n':
		return nil, true
	}
	if !isIntegerText(t) {
		return nil, false
	}
	i, ok := parseInt(t)
	if !ok {
		return nil, false
	}
	return i, true
}

// parseInt parses the text of a JSON integer, as strconv.ParseInt does;
// ok is false if an int64 does not hold it.
func parseInt(t []byte) (int64, bool) {
	digits := t
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > 18 { // 18 digits always fit
		i, err := strconv.ParseInt(string(t), 10, 64)
		return i, err == nil
	}
	var n int64
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if len(digits) < len(t) {
		n = -n
	}
	return n, true
}

// appendAsEncoded appends the text t of a JSON value as AppendJSON writes
// its decoded value, if that is t itself: a string that needs no escape
// (no backslash, no control character, valid UTF-8 without U+2028 or
// U+2029), an integer written as strconv writes it, true, false or null.
// ok is false for any other value, which the caller decodes and encodes.
func appendAsEncoded(dst, t []byte) ([]byte, bool) {
	switch t[0] {
	case '"':
		if !plainASCII(t[1 : len(t)-1]) {
			return appendAsEncodedUTF8(dst, t)
		}
		return append(dst, t...), true
	case 't', 'f', 'n':
		return append(dst, t...), true
	}
	if !isIntegerText(t) || len(t) > 1 && (t[0] == '0' || t[0] == '-' && t[1] == '0') {
		return dst, false // -0 is written 0, 01 is not JSON
	}
	if _, ok := parseInt(t); !ok {
		return dst, false
	}
	return append(dst, t...), true
}

// plainASCII reports whether every byte of s is ASCII text that a JSON
// string holds as is: none below 0x20, no backslash, none of 0x80 and
// above. It reads eight bytes at a time (the tests of "has a byte less
// than n" and "has a zero byte" of Bit Twiddling Hacks, exact as a yes or
// no).
func plainASCII(s []byte) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for len(s) >= 8 {
		x := binary.LittleEndian.Uint64(s)
		bs := x ^ ones*'\\'
		if (x|(x-ones*0x20)&^x|(bs-ones)&^bs)&highs != 0 {
			return false
		}
		s = s[8:]
	}
	for _, c := range s {
		if c < 0x20 || c == '\\' || c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// appendAsEncodedUTF8 is appendAsEncoded of a string with a byte that is
// not plain ASCII text.
func appendAsEncodedUTF8(dst, t []byte) ([]byte, bool) {
	s := t[1 : len(t)-1]
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == '\\' {
				return dst, false
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && n == 1 || r == '\u2028' || r == '\u2029' {
			return dst, false
		}
		i += n
	}
	return append(dst, t...), true
}

// fieldTextKey appends to dst the key that expression.Evaluator.Key gives
// value.name over the JSON object b, read from the field's text, if the
// text is that key: a string without escapes (its text between the
// quotes), an integer as strconv writes it, true, false, null, or a field
// b lacks (null). ok is false otherwise, and if b cannot be scanned: the
// caller evaluates the expression.
func fieldTextKey(dst, b []byte, name string) (key []byte, ok bool) {
	text, ok := fieldText(b, name)
	if !ok {
		return dst, false
	}
	return textKey(dst, text)
}

// textKey appends to dst the key that expression.Evaluator.Key gives a
// value whose JSON text is text (nil: a missing field, null), if the text
// is that key (fieldTextKey's cases); ok is false otherwise.
func textKey(dst, text []byte) (key []byte, ok bool) {
	switch {
	case text == nil:
		return append(dst, "null"...), true
	case text[0] == '"':
		s := text[1 : len(text)-1]
		if bytes.IndexByte(s, '\\') >= 0 {
			return dst, false
		}
		return append(dst, s...), true
	}
	return appendAsEncoded(dst, text)
}

// scalarArgs sets args[i] to the value of field fields[i] of the JSON
// object b, as value.fields[i] gives it over the decoded value (nil where b
// lacks the field; args[i] untouched where fields[i] is ""), if each is a
// scalar that scalarValue decodes; texts is scratch space of len(fields).
// ok is false otherwise, and if b cannot be scanned: the caller evaluates
// the expressions.
func scalarArgs(b []byte, fields []string, texts [][]byte, args []any) (ok bool) {
	clear(texts)
	if !scanObject(b, func(k, x []byte) {
		for i, f := range fields {
			if f != "" && string(k) == f {
				texts[i] = x // the last one if the name repeats, as DecodeJSON
			}
		}
	}) {
		return false
	}
	for i, f := range fields {
		switch {
		case f == "":
		case texts[i] == nil:
			args[i] = nil
		default:
			v, ok := scalarValue(texts[i])
			if !ok {
				return false
			}
			args[i] = v
		}
	}
	return true
}

// fieldText returns the text of the top-level field name of the JSON
// object b (the last one if the name repeats, as DecodeJSON), nil if b
// lacks it; ok is false if b cannot be scanned.
func fieldText(b []byte, name string) (text []byte, ok bool) {
	ok = scanObject(b, func(k, x []byte) {
		if string(k) == name {
			text = x
		}
	})
	return text, ok
}
