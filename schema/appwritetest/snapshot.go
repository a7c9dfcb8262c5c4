package appwritetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// snapshot is an encoded state as a list of pieces to write one after the other. A
// document's piece is its kept encoding (collection.enc): a write that changes the
// document drops it (indexDoc, dropDoc) rather than changing it, so a snapshot taken
// under the lock can be written after the lock is released.
type snapshot [][]byte

func (p *snapshot) str(s string) { *p = append(*p, []byte(s)) }
func (p *snapshot) raw(b []byte) { *p = append(*p, b) }

func (p snapshot) WriteTo(w io.Writer) (int64, error) {
	var n int64
	for _, b := range p {
		k, err := w.Write(b)
		n += int64(k)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func (p snapshot) bytes() []byte {
	var b bytes.Buffer
	_, _ = p.WriteTo(&b)
	return b.Bytes()
}

// encodeState is json.Marshal(s.st) without encoding every document again on every
// snapshot (issue 15: the flusher snapshots the whole state a few times a second while
// writes arrive, under the lock every request waits on, and encoding 20,000 documents
// each time made every write wait longer as collections grew). Only documents written
// since the last snapshot are encoded; the others' pieces are referenced. The result
// decodes to what json.Marshal(s.st) decodes to (TestUniqueIndexesFollowManyWrites
// checks; the documents' keys are not sorted). Call with s.mu held.
func (s *Server) encodeState() (snapshot, error) {
	var out snapshot
	// state's members, in its fields' order.
	for i, m := range []struct {
		name string
		v    any
	}{{"users", s.st.Users}, {"sessions", s.st.Sessions}} {
		b, err := json.Marshal(m.v)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			out.str(`{"` + m.name + `":`)
		} else {
			out.str(`,"` + m.name + `":`)
		}
		out.raw(b)
	}
	out.str(`,"databases":`)
	if s.st.Databases == nil {
		out.str("null")
	} else {
		out.str("{")
		first := true
		for id, db := range s.st.Databases {
			if !first {
				out.str(",")
			}
			first = false
			out.raw(jsonKey(id))
			if err := encodeDatabase(&out, db); err != nil {
				return nil, err
			}
		}
		out.str("}")
	}
	b, err := json.Marshal(s.st.Buckets)
	if err != nil {
		return nil, err
	}
	out.str(`,"buckets":`)
	out.raw(b)
	out.str("}")
	return out, nil
}

func encodeDatabase(out *snapshot, db *database) error {
	head := *db
	head.Collections = nil
	b, err := json.Marshal(&head)
	if err != nil {
		return err
	}
	if db.Collections == nil {
		out.raw(b)
		return nil
	}
	before, after, err := split(b, `"collections":null`)
	if err != nil {
		return err
	}
	out.raw(before)
	out.str("{")
	first := true
	for id, c := range db.Collections {
		if !first {
			out.str(",")
		}
		first = false
		out.raw(jsonKey(id))
		if err := c.encode(out); err != nil {
			return err
		}
	}
	out.str("}")
	out.raw(after)
	return nil
}

func (c *collection) encode(out *snapshot) error {
	head := *c
	head.Docs = nil
	b, err := json.Marshal(&head)
	if err != nil {
		return err
	}
	if c.Docs == nil {
		out.raw(b)
		return nil
	}
	before, after, err := split(b, `"docs":null`)
	if err != nil {
		return err
	}
	if c.enc == nil {
		c.enc = make(map[*document][]byte, len(c.Docs))
	}
	out.raw(before)
	out.str("{")
	first := true
	for _, d := range c.Docs {
		e, ok := c.enc[d]
		if !ok {
			v, err := json.Marshal(d)
			if err != nil {
				return err
			}
			e = append(jsonKey(d.ID), v...)
			c.enc[d] = e
		}
		if !first {
			out.str(",")
		}
		first = false
		out.raw(e)
	}
	out.str("}")
	out.raw(after)
	return nil
}

// jsonKey is a JSON object key and its colon.
func jsonKey(k string) []byte {
	kb, _ := json.Marshal(k)
	return append(kb, ':')
}

// split cuts the object b around its member field (`"name":null`), keeping `"name":` in
// before. The last occurrence: only fields without free-form keys (numbers, times,
// escaped strings) follow collections (none) and docs (seq, createdAt, updatedAt).
func split(b []byte, field string) (before, after []byte, err error) {
	i := bytes.LastIndex(b, []byte(field))
	if i < 0 {
		return nil, nil, fmt.Errorf("encode snapshot: no %s", field)
	}
	name := len(field) - len("null")
	return b[:i+name], b[i+len(field):], nil
}
