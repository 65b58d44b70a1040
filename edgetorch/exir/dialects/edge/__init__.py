"""The Edge dialect's package, where ExecuTorch keeps it: ``exir.dialects.edge._ops`` holds its op objects."""
