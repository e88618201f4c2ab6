package cli

import (
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

// `busbar completion bash|zsh|fish`: a script built from the help table
// (verbs, subcommands) and from each command's own flag set, so it cannot
// drift from what the binary accepts.

// completionShells are the shells `busbar completion` writes for.
var completionShells = []string{"bash", "zsh", "fish"}

func init() {
	addVerb(runCompletion, []helpPage{
		{path: "completion", args: "SHELL", summary: "print a shell completion script (bash, zsh or fish)",
			text: `Prints a script that completes busbar's commands, subcommands and flags.
Load it from your shell's start-up file.`,
			exit:    "0  printed\n2  an unknown shell",
			example: "$ source <(busbar completion bash)\n$ busbar completion fish > ~/.config/fish/completions/busbar.fish"},
	})
}

func runCompletion(args []string, stdio IO) int {
	fs := flag.NewFlagSet("completion", flag.ContinueOnError)
	if !parseFlags(stdio, "completion", fs, args) {
		return exitUsage
	}
	if fs.NArg() != 1 {
		return usageError(stdio, "completion", "%s", argCountError("SHELL", fs.Args()))
	}
	switch sh := fs.Arg(0); sh {
	case "bash":
		writeBash(stdio.Stdout)
	case "zsh":
		writeZsh(stdio.Stdout)
	case "fish":
		writeFish(stdio.Stdout)
	default:
		return usageError(stdio, "completion", "unknown shell %q (want %s)", sh, orList(completionShells))
	}
	return exitOK
}

// flagsOf are the flags of the command at path, as --name, sorted: the
// command is run with --help in capture mode, which records its flag set
// and prints nothing.
func flagsOf(path string) []string {
	var out []string
	if fs := flagSetOf(path); fs != nil {
		fs.VisitAll(func(f *flag.Flag) { out = append(out, "--"+f.Name) })
	}
	sort.Strings(out)
	return out
}

// writeCases writes the two case statements both the bash and the zsh
// function use: a verb's subcommands (subFmt: the verb, its subcommands),
// then each command's flags (flagFmt: the path, its flags).
func writeCases(w io.Writer, subFmt, flagFmt string) {
	for _, v := range verbNames() {
		if subs := subcommands(v); len(subs) > 0 {
			fmt.Fprintf(w, subFmt, v, strings.Join(subs, " "))
		}
	}
	fmt.Fprint(w, "  esac\n  case $key in\n")
	for _, p := range helpPages {
		if len(subcommands(p.path)) > 0 {
			continue
		}
		if fl := flagsOf(p.path); len(fl) > 0 {
			fmt.Fprintf(w, flagFmt, p.path, strings.Join(append(fl, "--help"), " "))
		}
	}
}

// firstWords are what completes the first word.
func firstWords() string { return strings.Join(append(verbNames(), "--help", "--version"), " ") }

// writeBash writes the bash script.
func writeBash(w io.Writer) {
	fmt.Fprintf(w, `# busbar completion for bash: source <(busbar completion bash)
_busbar() {
  local cur=${COMP_WORDS[COMP_CWORD]} verb=${COMP_WORDS[1]} key words
  if [[ $COMP_CWORD -eq 1 ]]; then
    COMPREPLY=($(compgen -W %q -- "$cur"))
    return
  fi
  key=$verb
  case $verb in
`, firstWords())
	writeCases(w, "    %s)\n      if [[ $COMP_CWORD -eq 2 ]]; then COMPREPLY=($(compgen -W %q -- \"$cur\")); return; fi\n      key=\"$verb ${COMP_WORDS[2]}\";;\n",
		"    %q) words=%q;;\n")
	fmt.Fprint(w, `    *) words="--help";;
  esac
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
  else
    COMPREPLY=($(compgen -f -- "$cur"))
  fi
}
complete -F _busbar busbar
`)
}

// writeZsh writes the zsh script: a completion function for compinit.
func writeZsh(w io.Writer) {
	fmt.Fprintf(w, `#compdef busbar
# busbar completion for zsh: busbar completion zsh > "${fpath[1]}/_busbar", or
# source <(busbar completion zsh) after compinit
_busbar() {
  local key=${words[2]}
  local -a flags
  if (( CURRENT == 2 )); then
    compadd -- %s
    return
  fi
  case ${words[2]} in
`, firstWords())
	writeCases(w, "    %s)\n      if (( CURRENT == 3 )); then compadd -- %s; return; fi\n      key=\"${words[2]} ${words[3]}\";;\n",
		"    %q) flags=(%s);;\n")
	fmt.Fprint(w, `    *) flags=(--help);;
  esac
  if [[ $PREFIX == -* ]]; then
    compadd -- $flags
  else
    _files
  fi
}
if (( $+functions[compdef] )); then compdef _busbar busbar; fi
`)
}

// writeFish writes the fish script: one complete line per verb,
// subcommand and flag.
func writeFish(w io.Writer) {
	fmt.Fprint(w, "# busbar completion for fish: busbar completion fish > ~/.config/fish/completions/busbar.fish\ncomplete -c busbar -f\n")
	verbs := verbNames()
	for _, v := range verbs {
		p, _ := page(v)
		fmt.Fprintf(w, "complete -c busbar -n '__fish_use_subcommand' -a %s -d %s\n", v, fishQuote(p.summary))
	}
	for _, v := range verbs {
		subs := subcommands(v)
		for _, s := range subs {
			p, _ := page(v + " " + s)
			fmt.Fprintf(w, "complete -c busbar -n '__fish_seen_subcommand_from %s; and not __fish_seen_subcommand_from %s' -a %s -d %s\n",
				v, strings.Join(subs, " "), s, fishQuote(p.summary))
		}
	}
	for _, p := range helpPages {
		if len(subcommands(p.path)) > 0 {
			continue
		}
		cond := "__fish_seen_subcommand_from " + p.path
		if verb, sub, ok := strings.Cut(p.path, " "); ok {
			cond = "__fish_seen_subcommand_from " + verb + "; and __fish_seen_subcommand_from " + sub
		}
		for _, f := range flagsOf(p.path) {
			fmt.Fprintf(w, "complete -c busbar -n '%s' -l %s\n", cond, strings.TrimPrefix(f, "--"))
		}
	}
}

// fishQuote single-quotes s for fish.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
