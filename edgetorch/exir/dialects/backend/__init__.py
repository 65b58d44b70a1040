"""The backend dialect's package, where ExecuTorch keeps it: ``exir.dialects.backend._ops`` holds its op objects."""
