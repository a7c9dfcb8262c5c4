package gateway

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"

	"privateassistant/runconfig"
)

// Reading a request body without decoding it. A chat request is mostly its messages and
// tool definitions (tens to hundreds of KB from Hermes), of which the gateway reads a
// handful of top-level members (model, stream, the tool lists and choices). The body is
// validated whole (json.Valid, the check a decode makes first), then its top-level
// members are found by a scan that skips each value without decoding it; only the members
// the gateway reads are decoded. On valid JSON the scan reads exactly what a decode into
// a map does (a later member of a name replaces an earlier one; a name is compared
// unescaped), and what is forwarded is that map written back (encodeBody), so the
// upstream sees exactly the members the gateway checked.

// objectMembers returns the top-level members of the JSON object b, each value the slice
// of b it spans (not copied, not decoded). ok is false when b is not an object. b must be
// valid JSON for the result to be what a decoder reads (json.Valid first); on anything
// else the scan still ends (every step advances) and may answer false.
func objectMembers(b []byte) (m map[string]json.RawMessage, ok bool) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	m = make(map[string]json.RawMessage, 8)
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return m, skipWS(b, i+1) == len(b)
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return nil, false
		}
		end := skipString(b, i)
		if end < 0 {
			return nil, false
		}
		key, ok := memberName(b[i:end])
		if !ok {
			return nil, false
		}
		i = skipWS(b, end)
		if i >= len(b) || b[i] != ':' {
			return nil, false
		}
		i = skipWS(b, i+1)
		vend := skipValue(b, i)
		if vend < 0 {
			return nil, false
		}
		m[key] = json.RawMessage(b[i:vend:vend])
		i = skipWS(b, vend)
		if i >= len(b) {
			return nil, false
		}
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
			continue
		case '}':
			return m, skipWS(b, i+1) == len(b)
		}
		return nil, false
	}
}

// memberName is a member's name as a decoder reads it: as written when it is plain ASCII
// with no escape, else unquoted by encoding/json (escapes, invalid UTF-8 replaced).
func memberName(q []byte) (string, bool) {
	plain := true
	for _, c := range q[1 : len(q)-1] {
		if c == '\\' || c < ' ' || c >= 0x80 {
			plain = false
			break
		}
	}
	if plain {
		return string(q[1 : len(q)-1]), true
	}
	var s string
	if json.Unmarshal(q, &s) != nil {
		return "", false
	}
	return s, true
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just past the string starting at b[i] (a quote), or -1.
func skipString(b []byte, i int) int {
	j := i + 1
	for {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return -1
		}
		e := bytes.IndexByte(b[j:j+k], '\\')
		if e < 0 {
			return j + k + 1
		}
		j += e + 2 // the escaped character (of \uXXXX: the u) is never the closing quote
		if j > len(b) {
			return -1
		}
	}
}

// skipValue returns the index just past the value starting at b[i], or -1.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); {
			switch b[j] {
			case '"':
				if j = skipString(b, j); j < 0 {
					return -1
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
			j++
		}
		return -1
	}
	j := i
	for j < len(b) {
		switch b[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			if j == i {
				return -1
			}
			return j
		}
		j++
	}
	if j == i {
		return -1
	}
	return j
}

// allowedLists remembers tool lists a policy was found to allow whole (allAllowed). A
// harness sends the same tool definitions on every call of a run (Hermes: tens of KB), so
// the list is decoded once per policy and recognised afterwards by its bytes. Bounded:
// past maxAllowedBytes of lists kept it starts over. A list is kept only when allowed, so
// a miss is always decoded and checked.
var allowedLists struct {
	mu    sync.Mutex
	m     map[string]map[string]struct{} // policy key → tool lists it allows whole
	bytes int
}

const maxAllowedBytes = 4 << 20

func policyKey(pol runconfig.ToolPolicy) string { return strings.Join(pol, "\x00") }

// listAllowed is allAllowed, remembered per policy and tool list.
func listAllowed(raw json.RawMessage, pol runconfig.ToolPolicy) bool {
	pk := policyKey(pol)
	allowedLists.mu.Lock()
	_, ok := allowedLists.m[pk][string(raw)]
	allowedLists.mu.Unlock()
	if ok {
		return true
	}
	if !allAllowed(raw, pol) {
		return false
	}
	if len(raw) > maxAllowedBytes/4 {
		return true // too large to keep
	}
	allowedLists.mu.Lock()
	defer allowedLists.mu.Unlock()
	if allowedLists.m == nil || allowedLists.bytes+len(raw) > maxAllowedBytes {
		allowedLists.m, allowedLists.bytes = map[string]map[string]struct{}{}, 0
	}
	lists := allowedLists.m[pk]
	if lists == nil {
		lists = map[string]struct{}{}
		allowedLists.m[pk] = lists
	}
	lists[string(raw)] = struct{}{}
	allowedLists.bytes += len(raw) + len(pk)
	return true
}

// validJSON is a fast path of json.Valid for request bodies (mostly text inside strings):
// true only for a document json.Valid accepts (FuzzValidJSON checks it). It answers false
// for anything it does not read (deeper than 512 levels, say): the caller then asks
// json.Valid, so the verdict is always json.Valid's.
func validJSON(b []byte) bool {
	i, ok := validValue(b, skipWS(b, 0), 0)
	return ok && skipWS(b, i) == len(b)
}

func validValue(b []byte, i, depth int) (int, bool) {
	if i >= len(b) || depth > 512 {
		return i, false
	}
	switch c := b[i]; {
	case c == '"':
		return validString(b, i)
	case c == '{':
		i = skipWS(b, i+1)
		if i < len(b) && b[i] == '}' {
			return i + 1, true
		}
		for {
			if i >= len(b) || b[i] != '"' {
				return i, false
			}
			var ok bool
			if i, ok = validString(b, i); !ok {
				return i, false
			}
			if i = skipWS(b, i); i >= len(b) || b[i] != ':' {
				return i, false
			}
			if i, ok = validValue(b, skipWS(b, i+1), depth+1); !ok {
				return i, false
			}
			if i = skipWS(b, i); i >= len(b) {
				return i, false
			}
			switch b[i] {
			case ',':
				i = skipWS(b, i+1)
			case '}':
				return i + 1, true
			default:
				return i, false
			}
		}
	case c == '[':
		i = skipWS(b, i+1)
		if i < len(b) && b[i] == ']' {
			return i + 1, true
		}
		for {
			var ok bool
			if i, ok = validValue(b, i, depth+1); !ok {
				return i, false
			}
			if i = skipWS(b, i); i >= len(b) {
				return i, false
			}
			switch b[i] {
			case ',':
				i = skipWS(b, i+1)
			case ']':
				return i + 1, true
			default:
				return i, false
			}
		}
	case c == 't':
		return i + 4, bytes.HasPrefix(b[i:], []byte("true"))
	case c == 'f':
		return i + 5, bytes.HasPrefix(b[i:], []byte("false"))
	case c == 'n':
		return i + 4, bytes.HasPrefix(b[i:], []byte("null"))
	case c == '-' || (c >= '0' && c <= '9'):
		return validNumber(b, i)
	}
	return i, false
}

// validString reads the string at b[i] (a quote): its end, and whether it is valid JSON
// (no control character, only the escapes JSON has).
func validString(b []byte, i int) (int, bool) {
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return j + 1, true
		case c < 0x20:
			return j, false
		case c == '\\':
			j++
			if j >= len(b) {
				return j, false
			}
			switch b[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if j+4 >= len(b) {
					return j, false
				}
				for _, h := range b[j+1 : j+5] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return j, false
					}
				}
				j += 4
			default:
				return j, false
			}
		}
	}
	return len(b), false
}

func validNumber(b []byte, i int) (int, bool) {
	digits := func(i int) (int, bool) {
		j := i
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
		return j, j > i
	}
	if b[i] == '-' {
		i++
	}
	if i >= len(b) {
		return i, false
	}
	var ok bool
	if b[i] == '0' {
		i++
	} else if i, ok = digits(i); !ok {
		return i, false
	}
	if i < len(b) && b[i] == '.' {
		if i, ok = digits(i + 1); !ok {
			return i, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i, ok = digits(i); !ok {
			return i, false
		}
	}
	return i, true
}
