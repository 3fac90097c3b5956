from django.urls import path

from inference_node import views

app_name = "inference_node"

urlpatterns = [
    path("nodes/", views.node_list, name="nodes"),
    path("nodes/new/", views.node_create, name="node_create"),
    path("nodes/<int:node_id>/", views.node_detail, name="node_detail"),
    path("nodes/<int:node_id>/drain/", views.node_drain, name="node_drain"),
    path("nodes/<int:node_id>/enable/", views.node_enable, name="node_enable"),
    path("nodes/<int:node_id>/disable/", views.node_disable, name="node_disable"),
    path("nodes/<int:node_id>/test/", views.node_test, name="node_test"),
    path("nodes/<int:node_id>/keys/add/", views.credential_add, name="credential_add"),
    path(
        "nodes/<int:node_id>/keys/<int:credential_id>/",
        views.credential_edit,
        name="credential_edit",
    ),
    path(
        "nodes/<int:node_id>/keys/<int:credential_id>/disable/",
        views.credential_disable,
        name="credential_disable",
    ),
    path(
        "nodes/<int:node_id>/keys/<int:credential_id>/enable/",
        views.credential_enable,
        name="credential_enable",
    ),
    path(
        "nodes/<int:node_id>/keys/<int:credential_id>/remove/",
        views.credential_remove,
        name="credential_remove",
    ),
]
