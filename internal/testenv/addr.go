package testenv

import (
	"net/url"

	gomysql "github.com/go-sql-driver/mysql"
)

// withAddr returns dsn, a DSN of driver ("pgx" or "mysql"), with its
// server address replaced by addr; with addr "", the address itself.
func withAddr(driver, dsn, addr string) (string, error) {
	if driver == "mysql" {
		cfg, err := gomysql.ParseDSN(dsn)
		if err != nil {
			return "", err
		}
		if addr == "" {
			return cfg.Addr, nil
		}
		cfg.Addr = addr
		return cfg.FormatDSN(), nil
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "", err
	}
	if addr == "" {
		return u.Host, nil
	}
	u.Host = addr
	return u.String(), nil
}
