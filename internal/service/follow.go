package service

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/idem-data/idem/internal/config"
)

// followEvery is how often a per-dataset background job looks for a
// config a reload applied.
const followEvery = time.Second

// followDatasets runs one job per dataset of the config in force until
// ctx is done, following reloads: defs names the datasets that get one,
// each with what its job is built from; a job whose definition changed is
// restarted, one whose dataset went is stopped. build makes the job of a
// dataset of c; what names the jobs in the log (watch, recheck).
func followDatasets(ctx context.Context, wg *sync.WaitGroup, cfg *atomic.Pointer[config.Config], what string,
	defs func(c *config.Config) map[string]string,
	build func(c *config.Config, name string) (func(context.Context) error, error), log zerolog.Logger) {
	type running struct {
		def  string
		stop context.CancelFunc
		done chan struct{}
	}
	jobs := map[string]*running{}
	stop := func(name string) {
		r := jobs[name]
		r.stop()
		<-r.done
		delete(jobs, name)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		var seen *config.Config
		for {
			if c := cfg.Load(); c != seen {
				seen = c
				want := defs(c)
				for name, r := range jobs {
					if want[name] != r.def {
						stop(name)
					}
				}
				for name, def := range want {
					if _, ok := jobs[name]; ok {
						continue
					}
					job, err := build(c, name)
					if err != nil {
						log.Error().Err(err).Str("dataset", name).Msg(what + ": not started")
						continue
					}
					jctx, cancel := context.WithCancel(ctx)
					r := &running{def: def, stop: cancel, done: make(chan struct{})}
					jobs[name] = r
					go func() {
						defer close(r.done)
						if err := job(jctx); err != nil {
							log.Error().Err(err).Str("dataset", name).Msg(what + ": stopped")
						}
					}()
				}
			}
			if !sleep(ctx, followEvery) {
				for name := range jobs {
					stop(name)
				}
				return
			}
		}
	}()
}
