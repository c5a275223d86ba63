import sys

try:
    from mergebot.cli import main
except KeyboardInterrupt:  # a Ctrl-C in its first milliseconds, before ``main`` handles it: the same one line
    from mergebot.messages.workdir import INTERRUPTED

    print(INTERRUPTED, file=sys.stderr)
    raise SystemExit(130) from None

if __name__ == "__main__":
    main()
