"""Image datasets for gpcnn, as ``keras.datasets`` names them: readers of the files already on disk
(nothing is downloaded), and image sources that ``gpcnn.load_images`` loads.

>>> from gpcnn import datasets
>>> data = datasets.load_fashion_mnist()
>>> gpcnn.load_images(db, "fm.train", data.x_train, data.y_train, class_names=data.class_names)
"""

from gpcnn.data.by_name import DATASET_NAMES, load_by_name
from gpcnn.data.cifar import Cifar10Files, load_cifar10, load_cifar10_files
from gpcnn.data.image_folder import ImageFolder, load_image_folder
from gpcnn.data.labelled import Dataset, DatasetError
from gpcnn.data.mnist import (
    FASHION_MNIST_CLASSES,
    FASHION_MNIST_DIR,
    MNIST_CLASSES,
    load_fashion_mnist,
    load_mnist,
    load_mnist_sample,
)
from gpcnn.data.sources import ArrayImages, ImageSource

__all__ = [
    "DATASET_NAMES",
    "FASHION_MNIST_CLASSES",
    "FASHION_MNIST_DIR",
    "MNIST_CLASSES",
    "ArrayImages",
    "Cifar10Files",
    "Dataset",
    "DatasetError",
    "ImageFolder",
    "ImageSource",
    "load_by_name",
    "load_cifar10",
    "load_cifar10_files",
    "load_fashion_mnist",
    "load_image_folder",
    "load_mnist",
    "load_mnist_sample",
]
