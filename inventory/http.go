package inventory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// MaxBody is the largest request body the HTTP API reads, in bytes.
const MaxBody = 4 << 10

// Admission bounds the requests the HTTP API works on at once; a request
// over a bound is answered 429 at once, without touching the database, so
// a crowd on one item or one user's retry storm cannot queue the others
// out.
type Admission struct {
	// PerUser is how many requests of one user may be in flight (4 if 0).
	PerUser int
	// PerItem is how many Reserves of one item may be in flight (1024 if
	// 0): beyond it, a combining batch is full for the next transaction
	// anyway.
	PerItem int
}

// Handler serves a Store over HTTP with JSON bodies:
//
//	POST   /reservations              {"request_id","user_id","sku","qty"}
//	GET    /reservations/{id}
//	POST   /reservations/{id}/confirm
//	DELETE /reservations/{id}         (cancel)
//	POST   /items                     {"sku","initial","per_user_limit"}
//	GET    /items/{sku}
//
// A reservation is answered 201 (also to a retry that finds it); a
// rejection 409 with the reservation that records it; bad input 400 (413
// for a body over MaxBody), an unknown sku or reservation 404, an expired
// one 410, a request over the admission bounds 429. Errors are
// {"error": "…"}; a 5xx means the outcome is unknown and the request may
// be retried with its request id.
type Handler struct {
	s     *Store
	adm   Admission
	mux   *http.ServeMux
	users gate[int64]
	items gate[string]
}

// NewHandler returns the HTTP API of s.
func NewHandler(s *Store, adm Admission) *Handler {
	if adm.PerUser <= 0 {
		adm.PerUser = 4
	}
	if adm.PerItem <= 0 {
		adm.PerItem = 1024
	}
	h := &Handler{s: s, adm: adm, mux: http.NewServeMux()}
	h.mux.HandleFunc("POST /reservations", h.reserve)
	h.mux.HandleFunc("GET /reservations/{id}", h.get)
	h.mux.HandleFunc("POST /reservations/{id}/confirm", h.settle(s.Confirm))
	h.mux.HandleFunc("DELETE /reservations/{id}", h.settle(s.Cancel))
	h.mux.HandleFunc("POST /items", h.addItem)
	h.mux.HandleFunc("GET /items/{sku}", h.item)
	h.mux.HandleFunc("/", h.noRoute)
	return h
}

// noRoute answers what no route serves, in the API's JSON: 405 with the
// methods the path takes, or 404.
func (h *Handler) noRoute(w http.ResponseWriter, r *http.Request) {
	var allowed []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := h.mux.Handler(probe); pattern != "/" && pattern != "" {
			allowed = append(allowed, m)
		}
	}
	if len(allowed) > 0 {
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		reply(w, http.StatusMethodNotAllowed, errorJSON{fmt.Sprintf("%s %s: the path takes %s", r.Method, r.URL.Path, strings.Join(allowed, ", "))})
		return
	}
	reply(w, http.StatusNotFound, errorJSON{fmt.Sprintf("no route %s %s", r.Method, r.URL.Path)})
}

// errorJSON is an error on the wire.
type errorJSON struct {
	Error string `json:"error"`
}

// AddItemBody is the body of POST /items.
type AddItemBody struct {
	SKU          string `json:"sku"`
	Initial      int64  `json:"initial"`
	PerUserLimit int    `json:"per_user_limit"`
}

func (h *Handler) addItem(w http.ResponseWriter, r *http.Request) {
	var body AddItemBody
	if err := decode(w, r, &body); err != nil {
		fail(w, err)
		return
	}
	if err := checkID("sku", body.SKU); err != nil {
		fail(w, badInput{err})
		return
	}
	if body.Initial < 0 || body.PerUserLimit < 0 {
		fail(w, badInput{fmt.Errorf("initial %d and per_user_limit %d must not be negative", body.Initial, body.PerUserLimit)})
		return
	}
	if err := h.s.AddItem(r.Context(), body.SKU, body.Initial, body.PerUserLimit); err != nil {
		fail(w, err)
		return
	}
	it, err := h.s.Item(r.Context(), body.SKU)
	if err != nil {
		fail(w, err)
		return
	}
	reply(w, http.StatusCreated, itemJSON(it))
}

// ServeHTTP serves the API.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// reservationJSON is a Reservation on the wire.
type reservationJSON struct {
	ID        int64     `json:"id"`
	RequestID string    `json:"request_id"`
	UserID    int64     `json:"user_id"`
	SKU       string    `json:"sku"`
	Qty       int       `json:"qty"`
	State     State     `json:"state"`
	Reason    string    `json:"reason,omitempty"`
	ExpiresAt time.Time `json:"expires_at"`
}

func toJSON(res Reservation) reservationJSON {
	j := reservationJSON{ID: res.ID, RequestID: res.RequestID, UserID: res.UserID, SKU: res.SKU, Qty: res.Qty,
		State: res.State, ExpiresAt: res.ExpiresAt.UTC()}
	if res.Reason != nil {
		j.Reason = res.Reason.Error()
	}
	return j
}

// itemJSON is an Item on the wire.
type itemJSON struct {
	SKU          string `json:"sku"`
	Initial      int64  `json:"initial"`
	Available    int64  `json:"available"`
	Reserved     int64  `json:"reserved"`
	Sold         int64  `json:"sold"`
	PerUserLimit int    `json:"per_user_limit"`
	Buckets      int    `json:"buckets,omitempty"`
}

// ReserveBody is the body of POST /reservations.
type ReserveBody struct {
	RequestID string `json:"request_id"`
	UserID    int64  `json:"user_id"`
	SKU       string `json:"sku"`
	Qty       int    `json:"qty"`
}

func (h *Handler) reserve(w http.ResponseWriter, r *http.Request) {
	var body ReserveBody
	if err := decode(w, r, &body); err != nil {
		fail(w, err)
		return
	}
	req := Request(body)
	if err := req.Validate(); err != nil {
		fail(w, badInput{err})
		return
	}
	if !h.users.enter(req.UserID, h.adm.PerUser) {
		fail(w, tooMany{fmt.Sprintf("user %d has %d requests in flight", req.UserID, h.adm.PerUser)})
		return
	}
	defer h.users.leave(req.UserID)
	if !h.items.enter(req.SKU, h.adm.PerItem) {
		fail(w, tooMany{fmt.Sprintf("item %q has %d reservations in flight", req.SKU, h.adm.PerItem)})
		return
	}
	defer h.items.leave(req.SKU)
	res, err := h.s.ReserveRequest(r.Context(), req)
	switch {
	case err == nil:
		reply(w, http.StatusCreated, toJSON(res))
	case res.State == Rejected:
		reply(w, http.StatusConflict, struct {
			Error       string          `json:"error"`
			Reservation reservationJSON `json:"reservation"`
		}{err.Error(), toJSON(res)})
	default:
		fail(w, err)
	}
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request) {
	id, err := reservationID(r)
	if err != nil {
		fail(w, err)
		return
	}
	res, err := h.s.Reservation(r.Context(), id)
	if err != nil {
		fail(w, err)
		return
	}
	reply(w, http.StatusOK, toJSON(res))
}

func (h *Handler) settle(move func(context.Context, int64) (Reservation, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, err := reservationID(r)
		if err != nil {
			fail(w, err)
			return
		}
		if err := noBody(w, r); err != nil {
			fail(w, err)
			return
		}
		res, err := move(r.Context(), id)
		if err != nil {
			fail(w, err)
			return
		}
		reply(w, http.StatusOK, toJSON(res))
	}
}

func (h *Handler) item(w http.ResponseWriter, r *http.Request) {
	sku := r.PathValue("sku")
	if err := checkID("sku", sku); err != nil {
		fail(w, badInput{err})
		return
	}
	it, err := h.s.Item(r.Context(), sku)
	if err != nil {
		fail(w, err)
		return
	}
	reply(w, http.StatusOK, itemJSON(it))
}

func reservationID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, badInput{fmt.Errorf("reservation id %q: not a positive integer", r.PathValue("id"))}
	}
	return id, nil
}

// decode reads one JSON object of at most MaxBody bytes into v, with no
// unknown fields and nothing after it.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			return tooLarge{}
		}
		return badInput{fmt.Errorf("body: %w", err)}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			return tooLarge{}
		}
		return badInput{errors.New("body: more than one JSON value")}
	}
	return nil
}

// noBody refuses a body on requests that take none.
func noBody(w http.ResponseWriter, r *http.Request) error {
	n, err := io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil || n > 0 {
		return badInput{errors.New("this request takes no body")}
	}
	return nil
}

// Errors of the HTTP layer, mapped to status codes by fail.
type (
	badInput struct{ err error }
	tooLarge struct{}
	tooMany  struct{ why string }
)

func (e badInput) Error() string { return e.err.Error() }
func (e badInput) Unwrap() error { return e.err }
func (tooLarge) Error() string   { return fmt.Sprintf("body larger than %d bytes", MaxBody) }
func (e tooMany) Error() string  { return "too many requests: " + e.why }

// fail answers err with its status code and {"error": err}.
func fail(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	var bad badInput
	var many tooMany
	switch {
	case errors.As(err, &bad):
		code = http.StatusBadRequest
	case errors.As(err, &tooLarge{}):
		code = http.StatusRequestEntityTooLarge
	case errors.As(err, &many):
		code = http.StatusTooManyRequests
		w.Header().Set("Retry-After", "1")
	case errors.Is(err, ErrUnknownSKU), errors.Is(err, ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, ErrExpired):
		code = http.StatusGone
	case errors.Is(err, ErrCancelled), errors.Is(err, ErrConfirmed), errors.Is(err, ErrRejected), errors.Is(err, ErrItemExists),
		errors.Is(err, ErrRequestReused), errors.Is(err, ErrSoldOut), errors.Is(err, ErrOverLimit):
		code = http.StatusConflict
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		code = http.StatusServiceUnavailable
	}
	reply(w, code, errorJSON{err.Error()})
}

func reply(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// gate counts requests in flight per key.
type gate[K comparable] struct {
	mu sync.Mutex
	n  map[K]int
}

// enter admits one more request for k unless limit are in flight.
func (g *gate[K]) enter(k K, limit int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n == nil {
		g.n = map[K]int{}
	}
	if g.n[k] >= limit {
		return false
	}
	g.n[k]++
	return true
}

func (g *gate[K]) leave(k K) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n[k]--; g.n[k] <= 0 {
		delete(g.n, k)
	}
}
