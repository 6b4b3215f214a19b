package consumer

import "time"

// InvalidDataset is the dataset label of messages whose dataset is not a
// configured one: metric labels stay bounded by the configuration.
const InvalidDataset = "_invalid"

// Hooks let internal/service count what the consumer does (Prometheus
// there; no registry here). Every field is optional and must be safe for
// concurrent use; hooks run on the message's goroutine, so they must be
// quick.
type Hooks struct {
	// Event is called for every delivery with its outcome and how long
	// the handler ran (0 when it was not called).
	Event func(dataset string, outcome Outcome, handled time.Duration)
	// DeadLetter is called once a dead letter is acknowledged by JetStream.
	DeadLetter func(dataset string, kind Kind)
	// Redelivery is called for a delivery with NumDelivered > 1.
	Redelivery func(dataset string)
	// InFlight is called with the number of loads running, on every change.
	InFlight func(n int)
	// LaneInFlight is called with the number of loads of a lane (LaneLive,
	// LaneBackfill) running, on every change.
	LaneInFlight func(lane string, n int)
	// Heartbeat is called for every InProgress sent.
	Heartbeat func(dataset string)
	// Circuit is called when the warehouse circuit opens (up false) and
	// when it closes (up true).
	Circuit func(up bool)
}

func (h *Hooks) event(dataset string, o Outcome, d time.Duration) {
	if h.Event != nil {
		h.Event(dataset, o, d)
	}
}

func (h *Hooks) deadLetter(dataset string, k Kind) {
	if h.DeadLetter != nil {
		h.DeadLetter(dataset, k)
	}
}

func (h *Hooks) redelivery(dataset string) {
	if h.Redelivery != nil {
		h.Redelivery(dataset)
	}
}

func (h *Hooks) inFlight(n int) {
	if h.InFlight != nil {
		h.InFlight(n)
	}
}

func (h *Hooks) laneInFlight(lane string, n int) {
	if h.LaneInFlight != nil {
		h.LaneInFlight(lane, n)
	}
}

func (h *Hooks) heartbeat(dataset string) {
	if h.Heartbeat != nil {
		h.Heartbeat(dataset)
	}
}
