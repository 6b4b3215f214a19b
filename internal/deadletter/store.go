package deadletter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Config names the streams a Store works with.
type Config struct {
	Stream        string // the dead-letter stream
	SubjectPrefix string // of dead letters: <prefix>.<dataset>
	EventsStream  string // where replays must be stored
}

// Store reads and edits the dead-letter stream. It never creates a consumer
// on it: reads are stream gets, so listing changes nothing.
type Store struct {
	cfg    Config
	js     jetstream.JetStream
	stream jetstream.Stream
}

// Open finds the dead-letter stream cfg names.
func Open(ctx context.Context, js jetstream.JetStream, cfg Config) (*Store, error) {
	s, err := js.Stream(ctx, cfg.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("dead-letter stream %s not found: run 'idem streams' (or start 'idem serve'), or check nats.dlq_stream", cfg.Stream)
	}
	if err != nil {
		return nil, fmt.Errorf("dead-letter stream %s: %w", cfg.Stream, err)
	}
	return &Store{cfg: cfg, js: js, stream: s}, nil
}

// Filter selects dead letters; the zero Filter selects all.
type Filter struct {
	Dataset string    // the subject's last token: a dataset, or InvalidSubjectToken
	Kind    Kind      // "" for any
	Reason  string    // a fatal reason word, matched exactly; "" for any
	Since   time.Time // failed at or after; zero for any
	// Newest, when above 0, reads only the last Newest sequences of the
	// stream (fewer dead letters where some were deleted): a bounded read
	// for a page that refreshes.
	Newest uint64
}

// subject narrows the read on the server, so a dataset filter does not read
// the other datasets' dead letters.
func (f Filter) subject(prefix string) string {
	if f.Dataset == "" {
		return prefix + ".>"
	}
	return prefix + "." + f.Dataset
}

func (f Filter) match(l Letter) bool {
	return (f.Kind == "" || l.Kind == f.Kind) && (f.Reason == "" || l.Reason == f.Reason) && !l.FailedAt.Before(f.Since)
}

// List returns the dead letters f selects, oldest first, up to the last one
// stored when it began: a dead letter written meanwhile (a replay failing
// again) is left for the next command. One get per dead letter. Bodies are
// kept only when withBody is set.
func (s *Store) List(ctx context.Context, f Filter, withBody bool) ([]Letter, error) {
	info, err := s.stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("dead-letter stream %s: %w", s.cfg.Stream, err)
	}
	subject := f.subject(s.cfg.SubjectPrefix)
	out := []Letter{}
	first := max(info.State.FirstSeq, 1)
	if f.Newest > 0 && info.State.LastSeq >= f.Newest {
		first = max(first, info.State.LastSeq-f.Newest+1)
	}
	for seq := first; seq <= info.State.LastSeq; {
		m, err := s.stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read dead letters of %s from seq %d: %w", s.cfg.Stream, seq, err)
		}
		if m.Sequence > info.State.LastSeq {
			break
		}
		l := read(m)
		if !withBody {
			l.Body = nil
		}
		if f.match(l) {
			out = append(out, l)
		}
		seq = m.Sequence + 1
	}
	return out, nil
}

// Get returns dead letter seq, body included.
func (s *Store) Get(ctx context.Context, seq uint64) (Letter, error) {
	m, err := s.stream.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Letter{}, fmt.Errorf("no dead letter %d in stream %s (already replayed or purged?): see 'idem dlq ls'", seq, s.cfg.Stream)
	}
	if err != nil {
		return Letter{}, fmt.Errorf("read dead letter %d of %s: %w", seq, s.cfg.Stream, err)
	}
	return read(m), nil
}

// Delete removes dead letter seq. One already gone is not an error: it is
// gone either way.
func (s *Store) Delete(ctx context.Context, seq uint64) error {
	err := s.stream.DeleteMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	return err
}
