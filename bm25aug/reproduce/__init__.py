"""The recorded results (``reproductions.yaml``), how to re-run them, and the tables made from them."""
