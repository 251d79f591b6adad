"""End-to-end training through BM25 computed in torch: arguments, examples, losses, callbacks, trainer."""
