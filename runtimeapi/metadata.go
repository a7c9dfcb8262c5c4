package runtimeapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// Limits of a response's metadata, OpenAI's (the Responses API's `metadata`: "up to 16
// key-value pairs … keys are strings with a maximum length of 64 characters. Values are
// strings with a maximum length of 512 characters").
const (
	MaxMetadataPairs    = 16
	MaxMetadataKeyLen   = 64
	MaxMetadataValueLen = 512
)

// ErrMetadata is wrapped by every refusal of ParseMetadata.
var ErrMetadata = errors.New("invalid metadata")

// ParseMetadata validates a create's `metadata` and returns it as the JSON the run
// record keeps ("" for none: absent, null or an empty object). Keys are sorted, so the
// same metadata is the same string.
func ParseMetadata(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var m map[string]any
	if raw[0] != '{' || json.Unmarshal(raw, &m) != nil {
		return "", fmt.Errorf("%w: metadata must be an object of string values", ErrMetadata)
	}
	if len(m) == 0 {
		return "", nil
	}
	if len(m) > MaxMetadataPairs {
		return "", fmt.Errorf("%w: metadata has %d keys; the limit is %d", ErrMetadata, len(m), MaxMetadataPairs)
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		s, ok := v.(string)
		if !ok {
			return "", fmt.Errorf("%w: metadata value of %q is not a string", ErrMetadata, k)
		}
		if k == "" || utf8.RuneCountInString(k) > MaxMetadataKeyLen {
			return "", fmt.Errorf("%w: metadata keys are 1-%d characters", ErrMetadata, MaxMetadataKeyLen)
		}
		if utf8.RuneCountInString(s) > MaxMetadataValueLen {
			return "", fmt.Errorf("%w: metadata value of %q is longer than %d characters", ErrMetadata, k, MaxMetadataValueLen)
		}
		out[k] = s
	}
	b, _ := json.Marshal(out) // encoding/json writes a map's keys sorted
	return string(b), nil
}

// Metadata decodes what ParseMetadata returned; an empty or unreadable value is an empty
// object (the response always carries one).
func Metadata(stored *string) map[string]string {
	out := map[string]string{}
	if stored != nil && *stored != "" {
		_ = json.Unmarshal([]byte(*stored), &out)
	}
	return out
}
