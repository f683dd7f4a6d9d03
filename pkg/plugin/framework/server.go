/*
Copyright The itemops Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package framework

import (
	"os"
	"strings"
	"sync"

	plugin "github.com/hashicorp/go-plugin"
	"github.com/sirupsen/logrus"
	"github.com/spf13/pflag"

	"github.com/vmware-tanzu/velero/pkg/cmd/server/config"
	veleroframework "github.com/vmware-tanzu/velero/pkg/plugin/framework"
	biav2 "github.com/vmware-tanzu/velero/pkg/plugin/framework/backupitemaction/v2"
	"github.com/vmware-tanzu/velero/pkg/plugin/framework/common"
	ibav1 "github.com/vmware-tanzu/velero/pkg/plugin/framework/itemblockaction/v1"
	riav2 "github.com/vmware-tanzu/velero/pkg/plugin/framework/restoreitemaction/v2"
	"github.com/vmware-tanzu/velero/pkg/util/logging"

	vsv2 "github.com/itemops/itemops/pkg/plugin/velero/volumesnapshotter/v2"
)

// Server registers plugins and serves them. Its methods mirror Velero's
// framework.Server and add the VolumeSnapshotter v2 kind.
type Server interface {
	// BindFlags parses Velero's plugin flags (log level, features) from flags.
	BindFlags(flags *pflag.FlagSet) Server
	// GetConfig returns the configuration the flags set.
	GetConfig() *config.Config

	RegisterBackupItemAction(pluginName string, initializer common.HandlerInitializer) Server
	RegisterBackupItemActions(map[string]common.HandlerInitializer) Server
	RegisterBackupItemActionV2(pluginName string, initializer common.HandlerInitializer) Server
	RegisterBackupItemActionsV2(map[string]common.HandlerInitializer) Server
	RegisterVolumeSnapshotter(pluginName string, initializer common.HandlerInitializer) Server
	RegisterVolumeSnapshotters(map[string]common.HandlerInitializer) Server
	RegisterObjectStore(pluginName string, initializer common.HandlerInitializer) Server
	RegisterObjectStores(map[string]common.HandlerInitializer) Server
	RegisterRestoreItemAction(pluginName string, initializer common.HandlerInitializer) Server
	RegisterRestoreItemActions(map[string]common.HandlerInitializer) Server
	RegisterRestoreItemActionV2(pluginName string, initializer common.HandlerInitializer) Server
	RegisterRestoreItemActionsV2(map[string]common.HandlerInitializer) Server
	RegisterDeleteItemAction(pluginName string, initializer common.HandlerInitializer) Server
	RegisterDeleteItemActions(map[string]common.HandlerInitializer) Server
	RegisterItemBlockAction(pluginName string, initializer common.HandlerInitializer) Server
	RegisterItemBlockActions(map[string]common.HandlerInitializer) Server

	// RegisterVolumeSnapshotterV2 registers a VolumeSnapshotter v2 under
	// pluginName; the initializer must return a vsv2.VolumeSnapshotter:
	// wrap it in VolumeSnapshotterV2 to have the compiler check that. The
	// same instance is also served as the v1 VolumeSnapshotter pluginName,
	// which is the kind Velero calls to take snapshots.
	RegisterVolumeSnapshotterV2(pluginName string, initializer common.HandlerInitializer) Server
	// RegisterVolumeSnapshottersV2 registers several VolumeSnapshotter v2 plugins.
	RegisterVolumeSnapshottersV2(map[string]common.HandlerInitializer) Server

	// Serve lists and serves the registered plugins until the caller ends
	// the process. It never returns.
	Serve()
}

type server struct {
	config              *config.Config
	log                 *logrus.Logger
	flagSet             *pflag.FlagSet
	backupItemAction    *veleroframework.BackupItemActionPlugin
	backupItemActionV2  *biav2.BackupItemActionPlugin
	volumeSnapshotter   *veleroframework.VolumeSnapshotterPlugin
	volumeSnapshotterV2 *VolumeSnapshotterV2Plugin
	objectStore         *veleroframework.ObjectStorePlugin
	restoreItemAction   *veleroframework.RestoreItemActionPlugin
	restoreItemActionV2 *riav2.RestoreItemActionPlugin
	deleteItemAction    *veleroframework.DeleteItemActionPlugin
	itemBlockAction     *ibav1.ItemBlockActionPlugin
}

// NewServer returns a Server with nothing registered.
func NewServer() Server {
	log := newLogger()
	serverLog := common.ServerLogger(log)
	return &server{
		config:              config.GetDefaultConfig(),
		log:                 log,
		backupItemAction:    veleroframework.NewBackupItemActionPlugin(serverLog),
		backupItemActionV2:  biav2.NewBackupItemActionPlugin(serverLog),
		volumeSnapshotter:   veleroframework.NewVolumeSnapshotterPlugin(serverLog),
		volumeSnapshotterV2: NewVolumeSnapshotterV2Plugin(serverLog),
		objectStore:         veleroframework.NewObjectStorePlugin(serverLog),
		restoreItemAction:   veleroframework.NewRestoreItemActionPlugin(serverLog),
		restoreItemActionV2: riav2.NewRestoreItemActionPlugin(serverLog),
		deleteItemAction:    veleroframework.NewDeleteItemActionPlugin(serverLog),
		itemBlockAction:     ibav1.NewItemBlockActionPlugin(serverLog),
	}
}

// newLogger logs as Velero's plugin server does: JSON on stderr, which
// go-plugin forwards to the host. Stdout belongs to go-plugin's protocol.
func newLogger() *logrus.Logger {
	logger := logrus.New()
	logger.Out = os.Stderr
	logger.Formatter = &logrus.JSONFormatter{
		FieldMap:         logrus.FieldMap{logrus.FieldKeyMsg: "@message"},
		DisableTimestamp: true,
	}
	logger.Hooks.Add((&logging.LogLocationHook{}).WithLoggerName("plugin"))
	logger.Hooks.Add(&logging.ErrorLocationHook{})
	logger.Hooks.Add(&logging.HcLogLevelHook{})
	return logger
}

func (s *server) BindFlags(flags *pflag.FlagSet) Server {
	s.flagSet = flags
	s.config.BindFlags(flags)
	s.flagSet.ParseErrorsAllowlist.UnknownFlags = true
	return s
}

func (s *server) GetConfig() *config.Config { return s.config }

func registerAll(m map[string]common.HandlerInitializer, register func(string, common.HandlerInitializer) Server) {
	for name, initializer := range m {
		register(name, initializer)
	}
}

func (s *server) RegisterBackupItemAction(name string, initializer common.HandlerInitializer) Server {
	s.backupItemAction.Register(name, initializer)
	return s
}

func (s *server) RegisterBackupItemActions(m map[string]common.HandlerInitializer) Server {
	registerAll(m, s.RegisterBackupItemAction)
	return s
}

func (s *server) RegisterBackupItemActionV2(name string, initializer common.HandlerInitializer) Server {
	s.backupItemActionV2.Register(name, initializer)
	return s
}

func (s *server) RegisterBackupItemActionsV2(m map[string]common.HandlerInitializer) Server {
	registerAll(m, s.RegisterBackupItemActionV2)
	return s
}

func (s *server) RegisterVolumeSnapshotter(name string, initializer common.HandlerInitializer) Server {
	s.volumeSnapshotter.Register(name, initializer)
	return s
}

func (s *server) RegisterVolumeSnapshotters(m map[string]common.HandlerInitializer) Server {
	registerAll(m, s.RegisterVolumeSnapshotter)
	return s
}

func (s *server) RegisterVolumeSnapshotterV2(name string, initializer common.HandlerInitializer) Server {
	shared := once(initializer)
	s.volumeSnapshotterV2.Register(name, shared)
	s.volumeSnapshotter.Register(name, shared)
	return s
}

func (s *server) RegisterVolumeSnapshottersV2(m map[string]common.HandlerInitializer) Server {
	registerAll(m, s.RegisterVolumeSnapshotterV2)
	return s
}

func (s *server) RegisterObjectStore(name string, initializer common.HandlerInitializer) Server {
	s.objectStore.Register(name, initializer)
	return s
}

func (s *server) RegisterObjectStores(m map[string]common.HandlerInitializer) Server {
	registerAll(m, s.RegisterObjectStore)
	return s
}

func (s *server) RegisterRestoreItemAction(name string, initializer common.HandlerInitializer) Server {
	s.restoreItemAction.Register(name, initializer)
	return s
}

func (s *server) RegisterRestoreItemActions(m map[string]common.HandlerInitializer) Server {
	registerAll(m, s.RegisterRestoreItemAction)
	return s
}

func (s *server) RegisterRestoreItemActionV2(name string, initializer common.HandlerInitializer) Server {
	s.restoreItemActionV2.Register(name, initializer)
	return s
}

func (s *server) RegisterRestoreItemActionsV2(m map[string]common.HandlerInitializer) Server {
	registerAll(m, s.RegisterRestoreItemActionV2)
	return s
}

func (s *server) RegisterDeleteItemAction(name string, initializer common.HandlerInitializer) Server {
	s.deleteItemAction.Register(name, initializer)
	return s
}

func (s *server) RegisterDeleteItemActions(m map[string]common.HandlerInitializer) Server {
	registerAll(m, s.RegisterDeleteItemAction)
	return s
}

func (s *server) RegisterItemBlockAction(name string, initializer common.HandlerInitializer) Server {
	s.itemBlockAction.Register(name, initializer)
	return s
}

func (s *server) RegisterItemBlockActions(m map[string]common.HandlerInitializer) Server {
	registerAll(m, s.RegisterItemBlockAction)
	return s
}

// VolumeSnapshotterV2 turns a function that returns a VolumeSnapshotter v2
// into the initializer RegisterVolumeSnapshotterV2 takes. Velero's
// initializers return any, so a function that returns something else
// would register and fail only when first called ("is not a
// VolumeSnapshotter v2"); through this one it does not compile:
//
//	RegisterVolumeSnapshotterV2("example.io/disks", framework.VolumeSnapshotterV2(newDisks))
//
// where newDisks is a func(logrus.FieldLogger) (vsv2.VolumeSnapshotter, error).
func VolumeSnapshotterV2(initializer func(logrus.FieldLogger) (vsv2.VolumeSnapshotter, error)) common.HandlerInitializer {
	return func(log logrus.FieldLogger) (any, error) {
		vs, err := initializer(log)
		if err != nil {
			return nil, err
		}
		return vs, nil
	}
}

// once makes the v1 and v2 servers of a VolumeSnapshotter v2 share one
// instance, so that what Init configured through one is configured for both.
func once(initializer common.HandlerInitializer) common.HandlerInitializer {
	var (
		mu       sync.Mutex
		instance any
	)
	return func(log logrus.FieldLogger) (any, error) {
		mu.Lock()
		defer mu.Unlock()
		if instance != nil {
			return instance, nil
		}
		created, err := initializer(log)
		if err != nil {
			return nil, err
		}
		instance = created
		return instance, nil
	}
}

// identifiers lists what the server registered, Velero's kinds first in
// Velero's order, then the kinds only itemops knows.
func (s *server) identifiers(command string) (velero, extended []veleroframework.PluginIdentifier) {
	add := func(list *[]veleroframework.PluginIdentifier, kind common.PluginKind, names []string) {
		for _, name := range names {
			*list = append(*list, veleroframework.PluginIdentifier{Command: command, Kind: kind, Name: name})
		}
	}
	add(&velero, common.PluginKindBackupItemAction, s.backupItemAction.Names())
	add(&velero, common.PluginKindBackupItemActionV2, s.backupItemActionV2.Names())
	add(&velero, common.PluginKindVolumeSnapshotter, s.volumeSnapshotter.Names())
	add(&velero, common.PluginKindObjectStore, s.objectStore.Names())
	add(&velero, common.PluginKindRestoreItemAction, s.restoreItemAction.Names())
	add(&velero, common.PluginKindRestoreItemActionV2, s.restoreItemActionV2.Names())
	add(&velero, common.PluginKindDeleteItemAction, s.deleteItemAction.Names())
	add(&velero, common.PluginKindItemBlockAction, s.itemBlockAction.Names())
	add(&extended, vsv2.PluginKind, s.volumeSnapshotterV2.Names())
	return velero, extended
}

func (s *server) Serve() {
	if s.flagSet != nil && !s.flagSet.Parsed() {
		if err := s.flagSet.Parse(os.Args[1:]); err != nil {
			s.log.Errorf("fail to parse the flags: %s", err.Error())
			return
		}
	}
	s.log.Level = s.config.LogLevel.Parse()
	s.log.Debugf("Setting log level to %s", strings.ToUpper(s.log.Level.String()))

	velero, extended := s.identifiers(os.Args[0])
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: veleroframework.Handshake(),
		Plugins: map[string]plugin.Plugin{
			string(common.PluginKindBackupItemAction):    s.backupItemAction,
			string(common.PluginKindBackupItemActionV2):  s.backupItemActionV2,
			string(common.PluginKindVolumeSnapshotter):   s.volumeSnapshotter,
			string(vsv2.PluginKind):                      s.volumeSnapshotterV2,
			string(common.PluginKindObjectStore):         s.objectStore,
			string(common.PluginKindPluginLister):        &listerPlugin{velero: velero, extended: extended},
			string(common.PluginKindRestoreItemAction):   s.restoreItemAction,
			string(common.PluginKindRestoreItemActionV2): s.restoreItemActionV2,
			string(common.PluginKindDeleteItemAction):    s.deleteItemAction,
			string(common.PluginKindItemBlockAction):     s.itemBlockAction,
		},
		GRPCServer: plugin.DefaultGRPCServer,
	})
}
