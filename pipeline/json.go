package pipeline

import (
	"strconv"

	"github.com/weir-stream/weir/internal/jsontext"
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

// AppendJSONString appends s as a JSON string (jsontext.Append: escaped as
// encoding/json escapes strings with SetEscapeHTML(false), invalid UTF-8
// replaced by U+FFFD).
func AppendJSONString(dst, s []byte) []byte { return jsontext.Append(dst, s) }
