"""Code that runs INSIDE a trial subprocess. Imports torch; never imports ``autotune``."""
