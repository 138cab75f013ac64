"""The built-in reference trainer (``trials/reference``): its adapter."""
