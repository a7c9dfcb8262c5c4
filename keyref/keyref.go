// Package keyref resolves key references: configuration never holds a secret, only where
// it is kept. Both the agent (which reads keys when it starts a harness) and the
// functions (which probe a harness an admin registers) use it.
//
// A reference is "env:NAME" (an environment variable), "file:/path" (a file whose
// content, trimmed of surrounding white space, is the key) or a bare NAME (an environment
// variable). The empty reference means "no key".
package keyref

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// Source says where a referenced key is kept.
type Source string

// Sources.
const (
	None Source = ""     // no key
	Env  Source = "env"  // an environment variable
	File Source = "file" // a file on the host that resolves it
)

// Ref is a parsed key reference.
type Ref struct {
	Source Source
	Name   string // the variable name or the file path
}

// ErrUnset: the referenced environment variable is not set.
var ErrUnset = errors.New("key is not set")

// Parse reads a reference; it never fails (a bare word names a variable).
func Parse(ref string) Ref {
	switch {
	case ref == "":
		return Ref{}
	case strings.HasPrefix(ref, "file:"):
		return Ref{Source: File, Name: strings.TrimPrefix(ref, "file:")}
	default:
		return Ref{Source: Env, Name: strings.TrimPrefix(ref, "env:")}
	}
}

// String is the reference in its canonical form.
func (r Ref) String() string {
	if r.Source == None {
		return ""
	}
	return string(r.Source) + ":" + r.Name
}

// Resolve reads the key r names: "" for no reference, an error wrapping ErrUnset for an
// unset variable, the file's error for an unreadable file.
func (r Ref) Resolve() (string, error) {
	switch r.Source {
	case None:
		return "", nil
	case File:
		b, err := os.ReadFile(r.Name)
		if err != nil {
			return "", fmt.Errorf("key file: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	default:
		v, ok := os.LookupEnv(r.Name)
		if !ok {
			return "", fmt.Errorf("secret %s: %w", r.Name, ErrUnset)
		}
		return v, nil
	}
}

// Resolve parses ref and reads the key it names.
func Resolve(ref string) (string, error) { return Parse(ref).Resolve() }
