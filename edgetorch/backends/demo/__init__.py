"""The tutorial's demo backend, runtime half (torch-free); its AOT half is edgetorch.exir.backend.demo."""
