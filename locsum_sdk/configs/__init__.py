"""Model configurations: plain dataclasses saved with the weights and read without torch, by the runtime (kinds,
memory, backends) and by `modeling`, which builds its torch modules from them."""
