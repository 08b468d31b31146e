package redislock

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts, run with EVALSHA and, on NOSCRIPT, EVAL (redis.Script).
var (
	//go:embed scripts/token.lua
	tokenSrc string
	//go:embed scripts/acquire.lua
	acquireSrc string
	//go:embed scripts/refresh.lua
	refreshSrc string
	//go:embed scripts/drop_hold.lua
	dropHoldSrc string
	//go:embed scripts/release.lua
	releaseSrc string
	//go:embed scripts/lock_waiters.lua
	lockWaitersSrc string
	//go:embed scripts/leave.lua
	leaveSrc string
	//go:embed scripts/transfer.lua
	transferSrc string
	//go:embed scripts/fence.lua
	fenceSrc string
	//go:embed scripts/fair_queue.lua
	fairQueueSrc string
	//go:embed scripts/fair_acquire.lua
	fairAcquireSrc string
	//go:embed scripts/fair_release.lua
	fairReleaseSrc string
	//go:embed scripts/fair_leave.lua
	fairLeaveSrc string
	//go:embed scripts/fair_transfer.lua
	fairTransferSrc string
	//go:embed scripts/sem_acquire.lua
	semAcquireSrc string
	//go:embed scripts/sem_release.lua
	semReleaseSrc string
	//go:embed scripts/sem_available.lua
	semAvailableSrc string
	//go:embed scripts/sem_refresh.lua
	semRefreshSrc string
	//go:embed scripts/latch_count_down.lua
	latchCountDownSrc string
	//go:embed scripts/rwlock.lua
	rwlockSrc string
	//go:embed scripts/force_release.lua
	forceReleaseSrc string
	//go:embed scripts/held_back.lua
	heldBackSrc string

	acquireScript = redis.NewScript(tokenSrc + acquireSrc)
	refreshScript = redis.NewScript(refreshSrc)
	releaseScript = redis.NewScript(dropHoldSrc + lockWaitersSrc + releaseSrc)
	leaveScript   = redis.NewScript(lockWaitersSrc + leaveSrc)
	// forceReleaseScript wakes a waiter as releaseScript does.
	forceReleaseScript = redis.NewScript(lockWaitersSrc + forceReleaseSrc)
	// transferScript has next_token, but not restart_wait: the lock it
	// hands on is held, so the server has not lost it.
	transferScript = redis.NewScript(tokenSrc + transferSrc)
	fenceScript    = redis.NewScript(fenceSrc)

	fairAcquireScript = redis.NewScript(tokenSrc + fairQueueSrc + fairAcquireSrc)
	fairReleaseScript = redis.NewScript(tokenSrc + dropHoldSrc + fairQueueSrc + fairReleaseSrc)
	fairLeaveScript   = redis.NewScript(tokenSrc + dropHoldSrc + fairQueueSrc + fairLeaveSrc)
	// fairTransferScript is transferScript behind a check of the queue.
	fairTransferScript = redis.NewScript(tokenSrc + fairQueueSrc + fairTransferSrc + transferSrc)

	semAcquireScript     = redis.NewScript(tokenSrc + semAcquireSrc)
	semAvailableScript   = redis.NewScript(semAvailableSrc)
	semReleaseScript     = redis.NewScript(semReleaseSrc)
	semRefreshScript     = redis.NewScript(semRefreshSrc)
	latchCountDownScript = redis.NewScript(latchCountDownSrc)
	rwlockScript         = redis.NewScript(tokenSrc + rwlockSrc)
	// heldBackScript is restart_wait alone, for Inspect.
	heldBackScript = redis.NewScript(tokenSrc + heldBackSrc)
)
