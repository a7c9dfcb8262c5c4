// Package llamatest runs a real llama-server in tests when the project could obtain one
// (scripts/llama/fetch.sh: Debian sid's llama.cpp-tools, extracted), with a tiny
// random-weight model this package writes: a llama-architecture GGUF v3 file of a few
// hundred KB that llama-server loads in a fraction of a second on a CPU and that
// generates (meaningless) tokens fast.
package llamatest

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"os"
)

// GGUF value types.
const (
	tUint32  = 4
	tInt32   = 5
	tFloat32 = 6
	tString  = 8
	tArray   = 9
)

// TinyModel describes the generated model.
type TinyModel struct {
	Name       string
	ContextLen uint32 // llama-server clamps generation by it: large values make long streams
	Embd       uint32 // 64
	Layers     uint32 // 2
	Heads      uint32 // 4
	FF         uint32 // 128
	Seed       int64
}

func (m *TinyModel) defaults() {
	if m.Name == "" {
		m.Name = "tiny"
	}
	if m.ContextLen == 0 {
		m.ContextLen = 32768
	}
	if m.Embd == 0 {
		m.Embd = 64
	}
	if m.Layers == 0 {
		m.Layers = 2
	}
	if m.Heads == 0 {
		m.Heads = 4
	}
	if m.FF == 0 {
		m.FF = 128
	}
}

type kv struct {
	key string
	typ uint32
	val any
}

type tensor struct {
	name string
	dims []uint64
	init func(i int) float32
}

type writer struct {
	w   *bufio.Writer
	n   int64
	err error
}

func (w *writer) put(v any) {
	if w.err != nil {
		return
	}
	w.err = binary.Write(w.w, binary.LittleEndian, v)
	w.n += int64(binary.Size(v))
}

func (w *writer) str(s string) {
	w.put(uint64(len(s)))
	if w.err == nil {
		_, w.err = w.w.WriteString(s)
		w.n += int64(len(s))
	}
}

func (w *writer) pad(align int64) {
	for w.n%align != 0 {
		w.put(uint8(0))
	}
}

// Write writes the model to path.
func (m TinyModel) Write(path string) error {
	m.defaults()
	// Vocabulary: three specials, the 256 byte tokens, a few pieces.
	tokens := []string{"<unk>", "<s>", "</s>"}
	types := []int32{2, 3, 3}
	for b := 0; b < 256; b++ {
		tokens = append(tokens, fmt.Sprintf("<0x%02X>", b))
		types = append(types, 6)
	}
	for _, p := range []string{"▁", "▁the", "▁hello", "▁world", "e", "t", "a", "o", "n", "s"} {
		tokens = append(tokens, p)
		types = append(types, 1)
	}
	scores := make([]float32, len(tokens))
	for i := range scores {
		scores[i] = -float32(i)
	}
	vocab := uint64(len(tokens))
	headDim := m.Embd / m.Heads
	kvs := []kv{
		{"general.architecture", tString, "llama"},
		{"general.name", tString, m.Name},
		{"general.alignment", tUint32, uint32(32)},
		{"llama.context_length", tUint32, m.ContextLen},
		{"llama.embedding_length", tUint32, m.Embd},
		{"llama.block_count", tUint32, m.Layers},
		{"llama.feed_forward_length", tUint32, m.FF},
		{"llama.attention.head_count", tUint32, m.Heads},
		{"llama.attention.head_count_kv", tUint32, m.Heads},
		{"llama.attention.layer_norm_rms_epsilon", tFloat32, float32(1e-5)},
		{"llama.rope.dimension_count", tUint32, headDim},
		{"tokenizer.ggml.model", tString, "llama"},
		{"tokenizer.ggml.tokens", tArray, tokens},
		{"tokenizer.ggml.scores", tArray, scores},
		{"tokenizer.ggml.token_type", tArray, types},
		{"tokenizer.ggml.bos_token_id", tUint32, uint32(1)},
		{"tokenizer.ggml.eos_token_id", tUint32, uint32(2)},
		{"tokenizer.ggml.unknown_token_id", tUint32, uint32(0)},
	}
	rng := rand.New(rand.NewSource(m.Seed))
	random := func(int) float32 { return float32(rng.NormFloat64() * 0.02) }
	one := func(int) float32 { return 1 }
	e, f := uint64(m.Embd), uint64(m.FF)
	ts := []tensor{{"token_embd.weight", []uint64{e, vocab}, random}, {"output_norm.weight", []uint64{e}, one},
		{"output.weight", []uint64{e, vocab}, random}}
	for l := uint32(0); l < m.Layers; l++ {
		p := fmt.Sprintf("blk.%d.", l)
		ts = append(ts,
			tensor{p + "attn_norm.weight", []uint64{e}, one},
			tensor{p + "attn_q.weight", []uint64{e, e}, random},
			tensor{p + "attn_k.weight", []uint64{e, e}, random},
			tensor{p + "attn_v.weight", []uint64{e, e}, random},
			tensor{p + "attn_output.weight", []uint64{e, e}, random},
			tensor{p + "ffn_norm.weight", []uint64{e}, one},
			tensor{p + "ffn_gate.weight", []uint64{e, f}, random},
			tensor{p + "ffn_up.weight", []uint64{e, f}, random},
			tensor{p + "ffn_down.weight", []uint64{f, e}, random})
	}

	file, err := os.Create(path)
	if err != nil {
		return err
	}
	defer file.Close()
	w := &writer{w: bufio.NewWriterSize(file, 1<<20)}
	w.put([]byte("GGUF"))
	w.put(uint32(3))
	w.put(uint64(len(ts)))
	w.put(uint64(len(kvs)))
	for _, k := range kvs {
		w.str(k.key)
		w.put(k.typ)
		switch v := k.val.(type) {
		case string:
			w.str(v)
		case uint32, float32:
			w.put(v)
		case []string:
			w.put(uint32(tString))
			w.put(uint64(len(v)))
			for _, s := range v {
				w.str(s)
			}
		case []float32:
			w.put(uint32(tFloat32))
			w.put(uint64(len(v)))
			w.put(v)
		case []int32:
			w.put(uint32(tInt32))
			w.put(uint64(len(v)))
			w.put(v)
		}
	}
	var offset uint64
	sizes := make([]uint64, len(ts))
	for i, t := range ts {
		n := uint64(1)
		for _, d := range t.dims {
			n *= d
		}
		sizes[i] = n
		w.str(t.name)
		w.put(uint32(len(t.dims)))
		w.put(t.dims)
		w.put(uint32(0)) // F32
		w.put(offset)
		offset += (n*4 + 31) / 32 * 32
	}
	w.pad(32)
	for i, t := range ts {
		buf := make([]byte, sizes[i]*4)
		for j := uint64(0); j < sizes[i]; j++ {
			binary.LittleEndian.PutUint32(buf[j*4:], math.Float32bits(t.init(int(j))))
		}
		w.put(buf)
		w.pad(32)
	}
	if w.err != nil {
		return w.err
	}
	if err := w.w.Flush(); err != nil {
		return err
	}
	return file.Close()
}
