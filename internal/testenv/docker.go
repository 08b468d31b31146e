package testenv

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/ory/dockertest/v3"
	"github.com/ory/dockertest/v3/docker"
)

// dockerFallback starts a throwaway database container when no server is
// reachable and a Docker engine is. The container publishes on 127.0.0.1
// only and removes itself after ten minutes.
func dockerFallback(driver string) (string, error) {
	dockerMu.Lock()
	defer dockerMu.Unlock()
	if dsn, ok := dockerDSN[driver]; ok {
		return dsn, nil
	}
	pool, err := dockertest.NewPool("")
	if err != nil {
		return "", err
	}
	if err := pool.Client.Ping(); err != nil {
		return "", fmt.Errorf("no Docker engine: %w", err)
	}
	opts := &dockertest.RunOptions{}
	var port docker.Port
	switch driver {
	case "pgx":
		opts.Repository, opts.Tag = "postgres", "15"
		opts.Env = []string{"POSTGRES_HOST_AUTH_METHOD=trust", "POSTGRES_DB=test"}
		port = "5432/tcp"
	case "mysql":
		opts.Repository, opts.Tag = "mariadb", "10.11"
		opts.Env = []string{"MARIADB_ALLOW_EMPTY_ROOT_PASSWORD=1", "MARIADB_DATABASE=test"}
		port = "3306/tcp"
	default:
		return "", errors.New("no container for driver " + driver)
	}
	opts.PortBindings = map[docker.Port][]docker.PortBinding{port: {{HostIP: "127.0.0.1"}}}
	res, err := pool.RunWithOptions(opts, func(hc *docker.HostConfig) { hc.AutoRemove = true })
	if err != nil {
		return "", err
	}
	_ = res.Expire(600)
	hostPort := res.GetHostPort(string(port))
	dsn := "postgres://postgres@" + hostPort + "/test?sslmode=disable"
	if driver == "mysql" {
		dsn = "root@tcp(" + hostPort + ")/test?parseTime=true"
	}
	pool.MaxWait = 2 * time.Minute
	err = pool.Retry(func() error {
		db, err := sql.Open(driver, dsn)
		if err != nil {
			return err
		}
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return db.PingContext(ctx)
	})
	if err != nil {
		_ = pool.Purge(res)
		return "", err
	}
	dockerDSN[driver] = dsn
	return dsn, nil
}
