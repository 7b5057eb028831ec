"""The XLA room: dumps, their passes and traffic, the fusion policy, the kernel cost model."""

# The exit status of every command of this room given input it cannot use (a file that is not
# there, a module that does not parse, rates that are not rates): argparse's own for a bad
# command line, so that a script tells "the tool could not read it" from "the check failed" (1).
EXIT_BAD_INPUT = 2
