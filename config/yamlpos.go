package config

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// yamlLineRE finds the line number yaml.v3 puts into its errors.
var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): `)

// yamlSyntaxError turns a YAML parser error in the text b into a problem
// at name:line, or name:line:column where it can tell (flowProblem).
func yamlSyntaxError(name string, b []byte, err error) error {
	msg := err.Error()
	m := yamlLineRE.FindStringSubmatch(msg)
	if m == nil {
		return fmt.Errorf("%s: YAML syntax: %s (nothing else was checked)", name, strings.TrimPrefix(msg, "yaml: "))
	}
	line, _ := strconv.Atoi(m[1])
	msg = msg[len(m[0]):]
	if strings.HasPrefix(msg, "did not find expected ',' or ") {
		// A flow mapping or sequence ({a: b}, [a, b]) whose next token is
		// not a separator: yaml.v3 gives the line where the collection
		// starts, counted from 0, and no column. Find the token.
		if l, c, ok := flowProblem(string(b), line); ok {
			return fmt.Errorf("%s:%d:%d: YAML syntax: %s (nothing else was checked)", name, l, c, flowHint(msg))
		}
		line++
	}
	return fmt.Errorf("%s:%d: YAML syntax: %s (nothing else was checked)", name, line, msg)
}

// flowHint adds to yaml.v3's message about a flow collection what usually
// causes it in a job file: an expression with a flow indicator, unquoted.
func flowHint(msg string) string {
	return msg + `: inside {…} or […], an expression with ?, {, }, [, ], a comma or ": " must be quoted (docs/yaml.md, "Expressions")`
}

// flowProblem finds, in src, the first token of the flow collection that
// starts on line (counted from 0) that is not where a flow collection
// allows it: after a complete node, anything but a comma, the collection's
// end or (in a mapping) a colon. As libyaml does, it ends a plain scalar
// at ',', '?', '[', ']', '{', '}', at ": " and at " #". It returns the
// token's line and column (from 1, the column in characters).
func flowProblem(src string, line int) (int, int, bool) {
	lines := strings.Split(src, "\n")
	if line < 0 || line >= len(lines) {
		return 0, 0, false
	}
	start := strings.IndexAny(lines[line], "{[")
	if start < 0 {
		return 0, 0, false
	}
	var stack []byte // the open collections: '}' or ']'
	afterNode := false
	inValue := false // in the innermost mapping, after the key's colon
	l, i := line, start
	at := func() (int, int, bool) {
		return l + 1, utf8.RuneCountInString(lines[l][:i]) + 1, true
	}
	for l < len(lines) {
		s := lines[l]
		if i >= len(s) {
			l, i = l+1, 0
			continue
		}
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\r':
			i++
			continue
		case c == '#' && (i == 0 || s[i-1] == ' ' || s[i-1] == '\t'):
			i = len(s)
			continue
		case c == ',':
			afterNode, inValue = false, false
			i++
			continue
		case c == ':' && (i+1 >= len(s) || strings.IndexByte(" \t,[]{}", s[i+1]) >= 0):
			if inValue {
				return at() // a second colon: a key where the value ends
			}
			afterNode, inValue = false, len(stack) > 0 && stack[len(stack)-1] == '}'
			i++
			continue
		case c == '}' || c == ']':
			if len(stack) == 0 || stack[len(stack)-1] != c {
				return at()
			}
			stack = stack[:len(stack)-1]
			i++
			if len(stack) == 0 {
				return 0, 0, false // the collection is well formed
			}
			// The collection was a value (or a key, or an element); what
			// follows is that of the enclosing collection, whose key's
			// colon, if it is a mapping, came before it.
			afterNode, inValue = true, stack[len(stack)-1] == '}'
			continue
		}
		if afterNode {
			return at()
		}
		switch c {
		case '{':
			stack = append(stack, '}')
			inValue = false
			i++
		case '[':
			stack = append(stack, ']')
			inValue = false
			i++
		case '?':
			if i+1 < len(s) && s[i+1] != ' ' {
				return at() // ? in a plain scalar: libyaml reads a key indicator
			}
			i++
		case '"', '\'':
			var ok bool
			if l, i, ok = skipQuoted(lines, l, i); !ok {
				return 0, 0, false
			}
			afterNode = true
		default:
			for i < len(s) && strings.IndexByte(",?[]{}", s[i]) < 0 &&
				!(s[i] == ':' && (i+1 >= len(s) || strings.IndexByte(" \t,[]{}", s[i+1]) >= 0)) &&
				!(s[i] == '#' && (s[i-1] == ' ' || s[i-1] == '\t')) {
				i++
			}
			afterNode = true
		}
	}
	return 0, 0, false
}

// skipQuoted returns the position after the quoted scalar that starts at
// lines[l][i].
func skipQuoted(lines []string, l, i int) (int, int, bool) {
	q := lines[l][i]
	i++
	for l < len(lines) {
		s := lines[l]
		for i < len(s) {
			switch {
			case q == '"' && s[i] == '\\':
				i += 2
			case s[i] == q && q == '\'' && i+1 < len(s) && s[i+1] == '\'':
				i += 2
			case s[i] == q:
				return l, i + 1, true
			default:
				i++
			}
		}
		l, i = l+1, 0
	}
	return 0, 0, false
}
