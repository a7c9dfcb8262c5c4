package runstate

import "time"

// Field is one field of a Patch: unset (the zero value: not written), set to a value, or
// cleared (written as null).
type Field[T any] struct {
	v     T
	state fieldState
}

type fieldState uint8

const (
	unset fieldState = iota
	valued
	cleared
)

// Set is a field written with v.
func Set[T any](v T) Field[T] { return Field[T]{v: v, state: valued} }

// Clear is a field written as null.
func Clear[T any]() Field[T] { return Field[T]{state: cleared} }

// Get returns the field's value and whether it has one (false when unset or cleared).
func (f Field[T]) Get() (T, bool) { return f.v, f.state == valued }

// Cleared reports whether the field is written as null.
func (f Field[T]) Cleared() bool { return f.state == cleared }

func (f *Field[T]) wire(conv func(T) any) (any, bool) {
	switch f.state {
	case valued:
		return conv(f.v), true
	case cleared:
		return nil, true
	}
	return nil, false
}

func (f *Field[T]) merge(g Field[T]) {
	if g.state != unset {
		*f = g
	}
}

// Patch is a change of a run record beside its status (Record.Change takes the status
// apart): typed where packages meet, so a value of the wrong type is a compile error, not
// a field the store silently drops; times stay time.Time until the wire.
type Patch struct {
	Phase              Field[string]
	HeartbeatAt        Field[time.Time]
	StartedAt          Field[time.Time]
	FinishedAt         Field[time.Time]
	ErrorSummary       Field[string]
	QueueReason        Field[string]
	QueuePosition      Field[int64]
	ProgressCompleted  Field[int64]
	ProgressTotal      Field[int64]
	LastSequence       Field[int64]
	Checkpoint         Field[string] // the work folder saved before a pause
	AssistantMessageID Field[string]
	Usage              Field[string] // JSON
}

// fields lists each field by its wire name with its wire value; the one list Fields and
// Without walk (TestPatchFieldsAreRunAttributes checks the names against the runs
// collection).
func (p *Patch) fields() []patchField {
	str := func(name string, f *Field[string]) patchField {
		v, ok := f.wire(func(v string) any { return v })
		return patchField{name: name, v: v, ok: ok}
	}
	num := func(name string, f *Field[int64]) patchField {
		v, ok := f.wire(func(v int64) any { return v })
		return patchField{name: name, v: v, ok: ok}
	}
	at := func(name string, f *Field[time.Time]) patchField {
		v, ok := f.wire(func(v time.Time) any { return v.UTC().Format(time.RFC3339Nano) })
		return patchField{name: name, v: v, ok: ok}
	}
	return []patchField{
		str("phase", &p.Phase),
		at("heartbeatAt", &p.HeartbeatAt),
		at("startedAt", &p.StartedAt),
		at("finishedAt", &p.FinishedAt),
		str("errorSummary", &p.ErrorSummary),
		str("queueReason", &p.QueueReason),
		num("queuePosition", &p.QueuePosition),
		num("progressCompleted", &p.ProgressCompleted),
		num("progressTotal", &p.ProgressTotal),
		num("lastSequence", &p.LastSequence),
		str("checkpoint", &p.Checkpoint),
		str("assistantMessageId", &p.AssistantMessageID),
		str("usage", &p.Usage),
	}
}

type patchField struct {
	name string // the attribute's wire name
	v    any
	ok   bool
}

// Fields is the patch's wire form: each set field by its attribute name (null when
// cleared). Empty when nothing is set.
func (p Patch) Fields() map[string]any {
	m := map[string]any{}
	for _, f := range p.fields() {
		if f.ok {
			m[f.name] = f.v
		}
	}
	return m
}

// Empty reports whether the patch writes nothing.
func (p Patch) Empty() bool { return len(p.Fields()) == 0 }

// Merge returns p with every field q sets (or clears) taken from q.
func (p Patch) Merge(q Patch) Patch {
	p.Phase.merge(q.Phase)
	p.HeartbeatAt.merge(q.HeartbeatAt)
	p.StartedAt.merge(q.StartedAt)
	p.FinishedAt.merge(q.FinishedAt)
	p.ErrorSummary.merge(q.ErrorSummary)
	p.QueueReason.merge(q.QueueReason)
	p.QueuePosition.merge(q.QueuePosition)
	p.ProgressCompleted.merge(q.ProgressCompleted)
	p.ProgressTotal.merge(q.ProgressTotal)
	p.LastSequence.merge(q.LastSequence)
	p.Checkpoint.merge(q.Checkpoint)
	p.AssistantMessageID.merge(q.AssistantMessageID)
	p.Usage.merge(q.Usage)
	return p
}

// Without returns p with the field of wire name name unset (the store refused its value),
// and whether p had it.
func (p Patch) Without(name string) (Patch, bool) {
	had := false
	for _, f := range p.fields() {
		had = had || (f.name == name && f.ok)
	}
	switch name {
	case "phase":
		p.Phase = Field[string]{}
	case "heartbeatAt":
		p.HeartbeatAt = Field[time.Time]{}
	case "startedAt":
		p.StartedAt = Field[time.Time]{}
	case "finishedAt":
		p.FinishedAt = Field[time.Time]{}
	case "errorSummary":
		p.ErrorSummary = Field[string]{}
	case "queueReason":
		p.QueueReason = Field[string]{}
	case "queuePosition":
		p.QueuePosition = Field[int64]{}
	case "progressCompleted":
		p.ProgressCompleted = Field[int64]{}
	case "progressTotal":
		p.ProgressTotal = Field[int64]{}
	case "lastSequence":
		p.LastSequence = Field[int64]{}
	case "checkpoint":
		p.Checkpoint = Field[string]{}
	case "assistantMessageId":
		p.AssistantMessageID = Field[string]{}
	case "usage":
		p.Usage = Field[string]{}
	}
	return p, had
}

// ClearQueue is the patch that takes a run off the waiting card: no reason, no position.
func ClearQueue() Patch {
	return Patch{QueueReason: Clear[string](), QueuePosition: Clear[int64]()}
}
