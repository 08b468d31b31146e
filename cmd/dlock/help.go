package main

import (
	"bytes"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strings"
)

// wantsHelp reports whether args ask for help, and for which subcommand
// ("" for dlock itself): dlock -h, --help, help [SUB], or SUB -h|--help.
func wantsHelp(args []string) (sub string, ok bool) {
	isHelp := func(a string) bool { return a == "-h" || a == "-help" || a == "--help" }
	switch {
	case len(args) == 0:
		return "", false
	case isHelp(args[0]):
		return "", true
	case args[0] == "help":
		if len(args) > 1 {
			return args[1], true
		}
		return "", true
	}
	if _, known := subcommands[args[0]]; !known {
		return "", false
	}
	// Up to run's "--": what follows is the command's own.
	flags := args[1:]
	if i := slices.Index(flags, "--"); i >= 0 {
		flags = flags[:i]
	}
	if slices.ContainsFunc(flags, isHelp) {
		return args[0], true
	}
	return "", false
}

// printHelp prints the usage of sub (all of dlock for "") to w and
// returns the exit status: 0, or exitUsage for an unknown subcommand.
func printHelp(sub string, w io.Writer) int {
	if sub == "" {
		fmt.Fprintln(w, usage)
		return 0
	}
	if _, known := subcommands[sub]; !known {
		fmt.Fprintf(w, "dlock: unknown subcommand %q\n%s\n", sub, usage)
		return exitUsage
	}
	var flags bytes.Buffer
	inv := invocation{sub: sub}
	fs := flagSet(&inv, &flags)
	fs.PrintDefaults()
	for _, line := range strings.Split(usage, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "dlock "+sub+" ") {
			fmt.Fprintln(w, "usage:\n"+line)
		}
	}
	fmt.Fprintf(w, "flags:\n%s", flags.String())
	return 0
}

// urlSecrets are the password of a server URL, as written and unescaped,
// found even in a URL that does not parse; none for a password shorter
// than minSecret, which would be found inside other words.
func urlSecrets(raw string) []string {
	i := strings.Index(raw, "://")
	if i < 0 {
		return nil
	}
	rest := raw[i+3:]
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return nil
	}
	c := strings.Index(rest[:at], ":")
	if c < 0 || c+1 == at {
		return nil
	}
	pw := rest[c+1 : at]
	if len(pw) < minSecret {
		return nil
	}
	out := []string{pw}
	if u, err := url.PathUnescape(pw); err == nil && u != pw {
		out = append(out, u)
	}
	if q := url.QueryEscape(pw); q != pw {
		out = append(out, q)
	}
	return out
}

// argSecrets are the passwords of DLOCK_URL and of every --url in args.
func argSecrets(args []string) []string {
	secrets := urlSecrets(os.Getenv("DLOCK_URL"))
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--url="); ok {
			secrets = append(secrets, urlSecrets(v)...)
		} else if v, ok := strings.CutPrefix(a, "-url="); ok {
			secrets = append(secrets, urlSecrets(v)...)
		} else if (a == "--url" || a == "-url") && i+1 < len(args) {
			secrets = append(secrets, urlSecrets(args[i+1])...)
		}
	}
	return secrets
}

// minSecret is the shortest password redacting hides.
const minSecret = 4

// redacting returns w, with every secret it is given replaced by xxx.
func redacting(w io.Writer, secrets []string) io.Writer {
	if len(secrets) == 0 {
		return w
	}
	pairs := make([]string, 0, 2*len(secrets))
	for _, s := range secrets {
		pairs = append(pairs, s, "xxx")
	}
	return redactor{w: w, r: strings.NewReplacer(pairs...)}
}

// redactor is redacting's writer. Each write is redacted on its own: the
// command writes whole lines.
type redactor struct {
	w io.Writer
	r *strings.Replacer
}

func (r redactor) Write(p []byte) (int, error) {
	if _, err := io.WriteString(r.w, r.r.Replace(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
