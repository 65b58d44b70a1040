"""ExecuTorch's ``exir._serialize._named_data_store`` path; the store is :mod:`edgetorch.exir.named_data_store`."""

from edgetorch.exir.named_data_store import DataEntry, NamedDataStore, NamedDataStoreOutput

__all__ = ["DataEntry", "NamedDataStore", "NamedDataStoreOutput"]
