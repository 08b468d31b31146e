package inventory

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

// api is a Store served by a Handler on a test server.
type api struct {
	t  *testing.T
	db *sql.DB
	s  *Store
	h  *Handler
	hs *httptest.Server
}

func newAPI(t *testing.T, driver string, adm Admission) *api {
	t.Helper()
	db := testenv.Open(t, driver, testenv.FreshDSN(t, driver))
	db.SetMaxOpenConns(8)
	ctx := context.Background()
	if err := Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	s, err := New(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AddItem(ctx, "hot", 3, 2); err != nil {
		t.Fatal(err)
	}
	h := NewHandler(s, adm)
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	return &api{t: t, db: db, s: s, h: h, hs: hs}
}

// do sends a request and returns the status and the decoded JSON body.
func (a *api) do(method, path, body string) (int, map[string]any) {
	a.t.Helper()
	req, err := http.NewRequest(method, a.hs.URL+path, strings.NewReader(body))
	if err != nil {
		a.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		a.t.Fatal(err)
	}
	var got map[string]any
	if len(raw) > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(raw, &got); err != nil {
			a.t.Fatalf("%s %s: %v: %q", method, path, err, raw)
		}
	}
	return resp.StatusCode, got
}

// unchanged fails t unless the item is as added and no request was
// recorded.
func (a *api) unchanged() {
	a.t.Helper()
	it, err := a.s.Item(context.Background(), "hot")
	if err != nil {
		a.t.Fatal(err)
	}
	if it != (Item{SKU: "hot", Initial: 3, Available: 3, PerUserLimit: 2}) {
		a.t.Errorf("item changed: %+v", it)
	}
	var n int
	if err := a.db.QueryRow("SELECT count(*) FROM inventory_reservations").Scan(&n); err != nil {
		a.t.Fatal(err)
	}
	if n != 0 {
		a.t.Errorf("%d requests recorded", n)
	}
}

// TestHTTPBadInput: each bad request is answered 4xx with a one-line
// message, and changes nothing.
func TestHTTPBadInput(t *testing.T) {
	a := newAPI(t, "pgx", Admission{})
	for _, c := range []struct {
		name, method, path, body string
		code                     int
	}{
		{"malformed JSON", "POST", "/reservations", `{"request_id": "r1", "user_id": 1,`, 400},
		{"not an object", "POST", "/reservations", `[1, 2]`, 400},
		{"unknown field", "POST", "/reservations", `{"request_id": "r1", "user_id": 1, "sku": "hot", "qty": 1, "price": 0}`, 400},
		{"two values", "POST", "/reservations", `{"request_id": "r1", "user_id": 1, "sku": "hot", "qty": 1} {}`, 400},
		{"empty body", "POST", "/reservations", ``, 400},
		{"unknown sku", "POST", "/reservations", `{"request_id": "r1", "user_id": 1, "sku": "cold", "qty": 1}`, 404},
		{"qty 0", "POST", "/reservations", `{"request_id": "r1", "user_id": 1, "sku": "hot", "qty": 0}`, 400},
		{"qty negative", "POST", "/reservations", `{"request_id": "r1", "user_id": 1, "sku": "hot", "qty": -2}`, 400},
		{"qty huge", "POST", "/reservations", `{"request_id": "r1", "user_id": 1, "sku": "hot", "qty": 1000000000000}`, 400},
		{"qty overflows", "POST", "/reservations", `{"request_id": "r1", "user_id": 1, "sku": "hot", "qty": 1e40}`, 400},
		{"qty a string", "POST", "/reservations", `{"request_id": "r1", "user_id": 1, "sku": "hot", "qty": "1"}`, 400},
		{"no request id", "POST", "/reservations", `{"user_id": 1, "sku": "hot", "qty": 1}`, 400},
		{"no user", "POST", "/reservations", `{"request_id": "r1", "sku": "hot", "qty": 1}`, 400},
		{"oversized body", "POST", "/reservations", `{"request_id": "` + strings.Repeat("x", MaxBody) + `"}`, 413},
		{"confirm a word", "POST", "/reservations/abc/confirm", ``, 400},
		{"confirm 0", "POST", "/reservations/0/confirm", ``, 400},
		{"confirm with a body", "POST", "/reservations/1/confirm", `{"qty": 5}`, 400},
		{"confirm nothing", "POST", "/reservations/99/confirm", ``, 404},
		{"cancel nothing", "DELETE", "/reservations/99", ``, 404},
		{"get nothing", "GET", "/reservations/99", ``, 404},
		{"unknown item", "GET", "/items/cold", ``, 404},
		{"item with a space", "GET", "/items/a%20b", ``, 400},
		{"wrong method", "PUT", "/reservations", `{}`, 405},
	} {
		code, body := a.do(c.method, c.path, c.body)
		if code != c.code {
			t.Errorf("%s: %d %v, want %d", c.name, code, body, c.code)
			continue
		}
		if c.code == 405 {
			continue
		}
		msg, _ := body["error"].(string)
		if msg == "" || strings.Contains(msg, "\n") {
			t.Errorf("%s: error %q, want one line", c.name, msg)
		}
	}
	a.unchanged()
}

// TestHTTPFlow: reserve (and retry), read, confirm, cancel, sold out and
// over the limit, each with its status.
func TestHTTPFlow(t *testing.T) {
	for _, driver := range []string{"pgx", "mysql"} {
		t.Run(driver, func(t *testing.T) {
			a := newAPI(t, driver, Admission{})
			code, first := a.do("POST", "/reservations", `{"request_id": "r1", "user_id": 1, "sku": "hot", "qty": 2}`)
			if code != 201 || first["state"] != "reserved" {
				t.Fatalf("reserve: %d %v", code, first)
			}
			code, again := a.do("POST", "/reservations", `{"request_id": "r1", "user_id": 1, "sku": "hot", "qty": 2}`)
			if code != 201 || again["id"] != first["id"] {
				t.Errorf("retry: %d %v, want 201 and reservation %v", code, again, first["id"])
			}
			if code, body := a.do("POST", "/reservations", `{"request_id": "r2", "user_id": 1, "sku": "hot", "qty": 1}`); code != 409 ||
				!strings.Contains(body["error"].(string), "limit") {
				t.Errorf("over the limit: %d %v, want 409", code, body)
			}
			code, second := a.do("POST", "/reservations", `{"request_id": "r3", "user_id": 2, "sku": "hot", "qty": 1}`)
			if code != 201 {
				t.Fatalf("reserve the last unit: %d %v", code, second)
			}
			if code, body := a.do("POST", "/reservations", `{"request_id": "r4", "user_id": 3, "sku": "hot", "qty": 1}`); code != 409 ||
				body["reservation"].(map[string]any)["state"] != "rejected" {
				t.Errorf("sold out: %d %v, want 409 with the rejection", code, body)
			}
			id := func(r map[string]any) string {
				return strings.TrimSuffix(strings.TrimSuffix(jsonString(r["id"]), ".0"), "\n")
			}
			for range 2 {
				if code, body := a.do("POST", "/reservations/"+id(first)+"/confirm", ``); code != 200 || body["state"] != "confirmed" {
					t.Errorf("confirm: %d %v", code, body)
				}
			}
			if code, body := a.do("DELETE", "/reservations/"+id(first), ``); code != 409 {
				t.Errorf("cancel a confirmed reservation: %d %v, want 409", code, body)
			}
			if code, body := a.do("DELETE", "/reservations/"+id(second), ``); code != 200 || body["state"] != "cancelled" {
				t.Errorf("cancel: %d %v", code, body)
			}
			if code, body := a.do("GET", "/reservations/"+id(second), ``); code != 200 || body["state"] != "cancelled" {
				t.Errorf("get: %d %v", code, body)
			}
			code, item := a.do("GET", "/items/hot", ``)
			if code != 200 || item["available"] != 1.0 || item["sold"] != 2.0 || item["reserved"] != 0.0 {
				t.Errorf("item: %d %v, want 1 available, 2 sold", code, item)
			}
		})
	}
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestHTTPAdmission: while a user's request waits on the database (the
// item's row is locked by another transaction), the user's next request
// and, past the item's bound, another user's are answered 429 at once.
func TestHTTPAdmission(t *testing.T) {
	a := newAPI(t, "pgx", Admission{PerUser: 1, PerItem: 2})
	ctx := context.Background()
	tx, err := a.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "SELECT available FROM inventory_items WHERE sku = 'hot' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	codes := make(chan int, 2)
	for u := range 2 {
		go func() {
			code, _ := a.do("POST", "/reservations", `{"request_id": "w`+string(rune('0'+u))+`", "user_id": `+string(rune('1'+u))+`, "sku": "hot", "qty": 1}`)
			codes <- code
		}()
	}
	dlocktest.Eventually(t, func() bool {
		a.h.items.mu.Lock()
		defer a.h.items.mu.Unlock()
		return a.h.items.n["hot"] == 2
	}, "two requests in flight")
	began := time.Now()
	code, body := a.do("POST", "/reservations", `{"request_id": "u1-again", "user_id": 1, "sku": "hot", "qty": 1}`)
	if code != 429 || !strings.Contains(body["error"].(string), "user 1") {
		t.Errorf("the user's second request: %d %v, want 429", code, body)
	}
	code, body = a.do("POST", "/reservations", `{"request_id": "u3", "user_id": 3, "sku": "hot", "qty": 1}`)
	if code != 429 || !strings.Contains(body["error"].(string), "item") {
		t.Errorf("a third request for the item: %d %v, want 429", code, body)
	}
	if waited := time.Since(began); waited > 5*time.Second {
		t.Errorf("the 429s took %v: they waited on the database", waited)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if code := <-codes; code != 201 {
			t.Errorf("an admitted request: %d, want 201", code)
		}
	}
	if code, _ := a.do("POST", "/reservations", `{"request_id": "u1-later", "user_id": 1, "sku": "hot", "qty": 1}`); code != 201 {
		t.Errorf("the user's request after the first finished: %d, want 201", code)
	}
}

// TestHTTPItems: an item is added and read over HTTP alone (curl can
// drive a sale from nothing); a second add of the sku is 409; every
// error, an unknown path and a wrong method included, is the API's JSON.
func TestHTTPItems(t *testing.T) {
	a := newAPI(t, "pgx", Admission{})
	code, got := a.do("POST", "/items", `{"sku":"new","initial":5,"per_user_limit":1}`)
	if code != http.StatusCreated || got["sku"] != "new" || got["available"] != float64(5) || got["per_user_limit"] != float64(1) {
		t.Fatalf("POST /items: %d %v", code, got)
	}
	if code, got := a.do("POST", "/reservations", `{"request_id":"r1","user_id":1,"sku":"new","qty":1}`); code != http.StatusCreated {
		t.Fatalf("reserving the new item: %d %v", code, got)
	}
	for _, c := range []struct {
		method, path, body string
		code               int
	}{
		{"POST", "/items", `{"sku":"new","initial":5}`, http.StatusConflict},
		{"POST", "/items", `{"sku":"neg","initial":-1}`, http.StatusBadRequest},
		{"GET", "/nowhere", "", http.StatusNotFound},
		{"GET", "/reservations", "", http.StatusMethodNotAllowed},
		{"PUT", "/items/new", "", http.StatusMethodNotAllowed},
	} {
		code, got := a.do(c.method, c.path, c.body)
		if msg, _ := got["error"].(string); code != c.code || msg == "" || strings.Contains(msg, "\n") {
			t.Errorf("%s %s: %d %v, want %d with a one-line JSON error", c.method, c.path, code, got, c.code)
		}
	}
}
