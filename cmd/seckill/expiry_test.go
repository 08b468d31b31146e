package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/inventory"
)

// startServe starts seckill serve with args and returns its base URL and
// its process (killed when t ends).
func startServe(t *testing.T, args string) (string, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestBadInput$")
	cmd.Env = append(os.Environ(), "SECKILL_MAIN=1", "SECKILL_ARGS=serve --addr 127.0.0.1:0 "+args)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	_, addr, found := strings.Cut(strings.TrimSpace(line), " on ")
	if err != nil || !found {
		t.Fatalf("seckill serve did not start: %q %v", line, err)
	}
	return addr, cmd
}

// post sends body as JSON and decodes the answer into into.
func post(t *testing.T, url string, body, into any, want int) {
	t.Helper()
	b, _ := json.Marshal(body)
	res, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != want {
		t.Fatalf("POST %s: %s, want %d", url, res.Status, want)
	}
	if into != nil {
		if err := json.NewDecoder(res.Body).Decode(into); err != nil {
			t.Fatal(err)
		}
	}
}

// TestServeExpiryAfterKill: the serve process that runs the fleet's sweep
// is killed (SIGKILL) while it holds the sweep's lock, and another starts:
// an expired reservation's unit is back within --ttl + --sweep +
// max(3 × --sweep, 2s), as -h says, not once a 30 s lock expires.
func TestServeExpiryAfterKill(t *testing.T) {
	if os.Getenv("SECKILL_MAIN") == "1" {
		return
	}
	db := testenv.Postgres(t)
	const ttl, sweep = time.Second, 200 * time.Millisecond
	args := fmt.Sprintf("--db postgres --strategy atomic --ttl %v --sweep %v --migrate", ttl, sweep)
	first, proc := startServe(t, args)
	sku := fmt.Sprintf("expiry-%d", time.Now().UnixNano())
	post(t, first+"/items", inventory.AddItemBody{SKU: sku, Initial: 3}, nil, http.StatusCreated)
	var res inventory.Reservation
	post(t, first+"/reservations", inventory.ReserveBody{RequestID: sku + "-1", UserID: 1, SKU: sku, Qty: 1}, &res, http.StatusCreated)
	reserved := time.Now()
	// Kill it while its sweep holds the slot's lock.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		var held bool
		if err := db.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM dlock_locks WHERE name LIKE '%"+inventory.SweeperJob+"%' AND owner IS NOT NULL AND expires_at > now())").Scan(&held); err != nil {
			t.Fatal(err)
		}
		if held {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := proc.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	second, _ := startServe(t, args)
	// The bound -h states (one second more for the processes to start).
	bound := ttl + sweep + max(3*sweep, 2*time.Second) + time.Second
	for {
		r, err := http.Get(second + "/items/" + sku)
		if err != nil {
			t.Fatal(err)
		}
		var it inventory.Item
		err = json.NewDecoder(r.Body).Decode(&it)
		r.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if it.Available == 3 {
			t.Logf("the unit was back %v after the reservation (bound %v)", time.Since(reserved).Round(time.Millisecond), bound)
			break
		}
		if time.Since(reserved) > bound {
			t.Fatalf("%v after a reservation of TTL %v, its unit is not back (item %+v); bound %v", time.Since(reserved).Round(time.Millisecond), ttl, it, bound)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
