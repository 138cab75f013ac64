"""musubi-tuner (kohya-ss/musubi-tuner): its adapter and its dataset/cache reading."""
