"""The demo backends under the module paths ExecuTorch's tutorial imports them from."""
