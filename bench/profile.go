package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// profileToken is the operator token of the serves the harness profiles.
const profileToken = "idembench-profile-token"

// EnvProfile names a folder: the day-one scenario then writes a CPU
// profile of each pass's `idem serve` there (http.pprof), for `go tool
// pprof`. The serves' CPU figures of such a run include the profiler's.
const EnvProfile = "IDEM_BENCH_PROFILE"

// profilePass asks the serve at addr for a CPU profile of d, starting now,
// and writes it to dir/name.cpu.pprof; wait returns once it is written
// (or failed, which it logs).
func (e *env) profilePass(ctx context.Context, dir, name string, d time.Duration) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := e.fetchProfile(ctx, dir, name, d); err != nil {
			e.logf("profile of %s: %v", name, err)
		}
	}()
	return func() { <-done }
}

func (e *env) fetchProfile(ctx context.Context, dir, name string, d time.Duration) error {
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", e.profileAddr, max(1, int(d.Seconds())))
	// The serve is starting: its endpoint answers within a few seconds.
	var res *http.Response
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+profileToken)
		res, err = http.DefaultClient.Do(req)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(res.Body, 512))
		return fmt.Errorf("%s: %s", res.Status, b)
	}
	f, err := os.Create(filepath.Join(dir, name+".cpu.pprof"))
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, res.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
