try:
    from mergebot.cli import main
except KeyboardInterrupt:  # a Ctrl-C in its first milliseconds, before ``main`` handles it: no traceback either
    raise SystemExit(130) from None

if __name__ == "__main__":
    main()
